"""Budget forcing (s1, Muennighoff et al., 2025): control how long a model thinks.

``cap``: think for at most ``think_tokens``; if the budget runs out, close the thinking and
force the answer with ``answer_cue``. ``extend``: when the model ends its thinking (emits an
``end_think`` delimiter or stops) before the budget is spent, suppress that and append
``wait_word`` so it keeps thinking, up to ``waits`` times; then force the answer as in cap.
Each continuation is a new call that prefills the assistant turn with everything so far, so
the backend must continue a prefilled message (``capabilities.continue_final``): the engine,
or vLLM / SGLang on their chat endpoint; a completions-only endpoint cannot.

``cap`` on a backend whose server enforces thinking budgets (``capabilities.thinking_budget``:
vLLM's ``thinking_token_budget``, SGLang's strict thinking) is one request: the server ends the
thinking at ``think_tokens`` and the model answers in the same sample, within ``answer_tokens``.
Continuations prefill the raw text so far, thinking delimiters included, so a model split by
its server or by paragen goes on thinking where it stopped. The answer is read from what follows
the thinking: a ``\boxed{}`` written while thinking never counts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode, extract_answer
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import written_text


class BudgetForcingConfig(StrategyConfig):
    mode: Literal["cap", "extend"] = "cap"
    think_tokens: TokenCount = Field(default=1024, description="thinking budget (sum over continuations)")
    waits: int = Field(
        default=2, ge=0, description="extend: how many times 'Wait' replaces the end of thinking"
    )
    answer_tokens: TokenCount = Field(default=64, description="budget of the forced answer")
    think_open: str = Field(default="", description="prefix opening the thinking, e.g. '<think>\\n'")
    end_think: tuple[str, ...] = Field(default=("</think>",), description="delimiters that end thinking")
    think_close: str = Field(default="\n</think>\n", description="written when the answer is forced")
    wait_word: str = "Wait"
    answer_cue: str = "\n\nFinal answer: \\boxed{"
    temperature: float | None = Field(default=None, ge=0)
    extract: ExtractMode = "auto"


class BudgetForcing(BaseStrategy[BudgetForcingConfig]):
    """One sample whose thinking is capped or extended, then an answer forced out of it."""

    name = "budget_forcing"
    Config = BudgetForcingConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        if cfg.mode == "cap" and ctx.capabilities.thinking_budget:
            return await self._server_cap(ctx, problem)
        ctx.require_continuation("budget forcing needs a backend that continues a prefilled reply")
        fmt = ctx.capabilities.thinking
        text, used, waits, last = cfg.think_open, 0, 0, None
        while True:
            trace = await ctx.sample(
                self._request(ctx, problem, text, cfg.think_tokens - used), label="think", parents=_ids(last)
            )
            text, used, last = text + written_text(trace, text, fmt), used + trace.completion_tokens, trace
            if not trace.is_ok or trace.is_truncated or used >= cfg.think_tokens:
                break
            if cfg.mode == "extend" and waits < cfg.waits:
                text, waits = f"{text}\n{cfg.wait_word}", waits + 1
                continue
            # A sample with no thinking section answered in its text; one still thinking is forced.
            found = extract_answer(text, cfg.extract) if trace.thinking == "none" else None
            if found is not None:  # it finished thinking and answered within budget
                return ctx.finish(found, text=text, metrics={"waits": float(waits), "forced": 0.0})
            break
        answer, text = await self._force(ctx, problem, text, last)
        return ctx.finish(answer, text=text, metrics={"waits": float(waits), "forced": 1.0})

    async def _server_cap(self, ctx: RunContext, problem: Problem) -> StrategyResult:
        """One sample whose thinking the server ends at the budget; its answer follows in the same sample."""
        cfg = self.config
        params: dict[str, Any] = {"max_tokens": cfg.think_tokens + cfg.answer_tokens}
        if cfg.temperature is not None:
            params["temperature"] = cfg.temperature
        messages = solve_messages(problem.question)
        request = ctx.request(messages=messages, thinking_budget=cfg.think_tokens, **params)
        trace = await ctx.sample(request, label="think")
        answer = extract_answer(trace.text, cfg.extract) if trace.is_ok else None
        metrics = {"waits": 0.0, "forced": float(trace.reasoning_tokens >= cfg.think_tokens), "server": 1.0}
        return ctx.finish(answer, text=trace.text, reasoning=trace.reasoning, metrics=metrics)

    async def _force(
        self, ctx: RunContext, problem: Problem, text: str, last: Trace | None
    ) -> tuple[str | None, str]:
        cfg = self.config
        prefix = text + cfg.think_close + cfg.answer_cue
        request = self._request(ctx, problem, prefix, cfg.answer_tokens, stop=False)
        trace = await ctx.sample(request, label="answer", parents=_ids(last))
        full = prefix + trace.text
        if trace.status == "error":  # what a failed sample said before failing is not an answer
            return None, full
        tail = cfg.answer_cue + trace.text
        answer = extract_answer(tail if "}" in trace.text else tail + "}", cfg.extract)
        return answer, full

    def _request(
        self, ctx: RunContext, problem: Problem, so_far: str, budget: int, *, stop: bool = True
    ) -> GenerateRequest:
        cfg = self.config
        params: dict[str, Any] = {"max_tokens": max(1, budget)}
        if cfg.temperature is not None:
            params["temperature"] = cfg.temperature
        if stop:
            params["stop"] = cfg.end_think
        messages = solve_messages(problem.question)
        if not so_far:
            return ctx.request(messages=messages, **params)
        messages.append(ChatMessage(role="assistant", content=so_far))
        return ctx.request(messages=messages, continue_final=True, **params)


def _ids(trace: Trace | None) -> list[int]:
    return [] if trace is None else [trace.id]
