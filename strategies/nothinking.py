"""NoThinking + parallel (Ma et al., arXiv 2504.09858): skip thinking, sample short answers, vote.

The assistant turn is prefilled with an already-closed thinking block, so a reasoning model
answers at once; n such answers are sampled in parallel and majority-voted. On a backend whose
server enforces thinking budgets (``capabilities.thinking_budget``) the requests ask for a budget
of 0 instead: the server closes the thinking itself, in the model's own words. Otherwise it needs
a backend that can continue a prefilled assistant message (``capabilities.continue_final``);
without it the strategy falls back to an instruction asking for the answer directly, and says so.
"""

from __future__ import annotations

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import annotate, overrides, vote_finish

PREFILL = "<think>\nThe thinking is done; time to write the answer.\n</think>\n\n"
DIRECT = "Answer directly, without working it out step by step. Give the final answer as \\boxed{ANSWER}."


class NoThinkingConfig(StrategyConfig):
    n: int = Field(default=8, ge=1, le=1024, description="short answers sampled at once")
    prefill: str = Field(default=PREFILL, min_length=1, description="the closed thinking block to prefill")
    max_tokens: TokenCount | None = Field(default=None, description="answer budget; None = run default")
    temperature: float | None = Field(default=None, ge=0)
    extract: ExtractMode = "auto"


class NoThinking(BaseStrategy[NoThinkingConfig]):
    """n answers with the thinking block prefilled as already closed, majority-voted."""

    name = "nothinking"
    Config = NoThinkingConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        request = self._request(ctx, problem)
        finished: list[Trace] = []
        async with ctx.fanout(request, n=cfg.n, label="answer") as fan:
            async for trace in fan:
                finished.append(annotate(trace, cfg.extract))
        server_budget = float(request.thinking_budget == 0)
        metrics = {"prefilled": float(request.continue_final), "server_budget": server_budget}
        return vote_finish(ctx, finished, metrics=metrics)

    def _request(self, ctx: RunContext, problem: Problem) -> GenerateRequest:
        cfg = self.config
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        messages = solve_messages(problem.question)
        if ctx.capabilities.thinking_budget:
            return ctx.request(messages=messages, thinking_budget=0, **params)
        if ctx.capabilities.continue_final:
            messages.append(ChatMessage(role="assistant", content=cfg.prefill))
            return ctx.request(messages=messages, continue_final=True, **params)
        ctx.emit("nothinking: backend cannot continue a prefilled reply; asking for a direct answer")
        return ctx.request(messages=solve_messages(problem.question, system=DIRECT), **params)
