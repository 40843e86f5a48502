"""``hogwild_text``: an APPROXIMATION of Hogwild! Inference for backends without a shared KV cache.

Real Hogwild! (``hogwild``) needs the engine: every worker reads the others' tokens in the same
forward pass. This strategy runs on any backend (vLLM, SGLang, llama.cpp, any OpenAI-compatible
server): the workers write in rounds of short chunks, all at once (``ctx.fanout``), and each
chunk's prompt is the worker's view rendered as text (the same layouts and prompts as
``hogwild``), so a worker sees what the others wrote up to the previous round. A server's prefix
cache serves the part of the prompt that did not change (the system prompt, the problem and the
history of finished steps), so re-sending the view each round stays affordable.

What differs from the real method, plainly: the others' text is one round late (up to
``chunk_tokens`` tokens), not instant; each round re-reads the unfinished steps (prefill work the
shared cache does not need); a chunk stops at a blank line so steps line up with chunk ends, and
the workers wait for each other at the end of every round; the end-of-sequence token cannot be
suppressed through an OpenAI-style API, so a worker that ends its turn just ends its chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from paragen import BaseStrategy, LiveSample, RunContext, StrategyConfig
from paragen.answers import last_boxed
from paragen.errors import ConfigError
from paragen.types import ChatMessage, GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._hogwild_prompts import NAMES, STEP_SEPARATOR, HogwildPrompts, ends_step, finisher_answer
from strategies.hogwild import Layout


class HogwildTextConfig(StrategyConfig):
    workers: int = Field(default=2, ge=1, le=len(NAMES), description="workers writing at once")
    layout: Layout = Field(default="combined", description="how each worker's view is rendered")
    chunk_tokens: TokenCount = Field(default=32, description="tokens per worker per round (the lag)")
    nudge_every: int = Field(default=256, ge=0, description="sequential tokens between nudges (0: never)")
    max_forward_passes: int | None = Field(
        default=None, gt=0, description="budget in sequential tokens (None: the run's max_tokens)"
    )
    finisher_tokens: TokenCount = Field(default=16, description="greedy tokens the finisher may write")
    stop_at_answer: bool = Field(default=True, description="end once a finished step holds a boxed answer")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")
    prompts: HogwildPrompts = Field(default_factory=HogwildPrompts)


@dataclass(slots=True)
class _Writer:
    index: int
    text: str  # everything in its turn: headers and what it wrote
    step: int = 1
    step_start: int = 0
    last_trace: int = -1


@dataclass(slots=True)
class _Board:
    """The shared text state of one run."""

    writers: list[_Writer]
    history: list[str] = field(default_factory=list)
    answer: str | None = None
    used: int = 0
    since_nudge: int = 0
    nudges: int = 0
    rounds: int = 0


class HogwildText(BaseStrategy[HogwildTextConfig]):
    """Approximate Hogwild!: rounds of short chunks, each prompt carrying the others' latest text."""

    name = "hogwild_text"
    Config = HogwildTextConfig
    count_field = "workers"  # -n sets the workers (a sweep's --n 2,4 compares team sizes)

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        caps = ctx.capabilities
        if not (caps.chat and caps.continue_final) and not caps.raw_prompt:
            raise ConfigError(
                "hogwild_text needs a backend that continues an assistant turn or takes raw prompts"
            )
        cfg = self.config
        board = _Board([_Writer(i, cfg.prompts.opener(i)) for i in range(cfg.workers)])
        budget = cfg.max_forward_passes or ctx.defaults.max_tokens
        if ctx.budget.max_sequential_tokens is not None:
            budget = min(budget, ctx.budget.max_sequential_tokens)
        while board.used < budget and board.answer is None:
            await self._round(problem, ctx, board, min(cfg.chunk_tokens, budget - board.used))
        finisher = None if board.answer is not None else await self._finish(problem, ctx, board)
        return ctx.finish(board.answer, text=_flatten(board, cfg.prompts, finisher), metrics=_metrics(board))

    async def _round(self, problem: Problem, ctx: RunContext, board: _Board, max_tokens: int) -> None:
        cfg, writers = self.config, board.writers
        requests = [self._request(problem, ctx, board, w, max_tokens) for w in writers]
        shown = [0] * len(writers)
        by_trace: dict[int, int] = {}

        def stream_text(live: LiveSample) -> None:
            index = by_trace[live.trace.id]
            text = live.text()
            if len(text) > shown[index]:
                ctx.emit_worker_text(live.trace.id, index, NAMES[index], text[shown[index] :])
                shown[index] = len(text)
            return None

        chunks: list[Trace] = []
        async with ctx.fanout(requests, label=f"round{board.rounds}", monitor=stream_text) as fan:
            for writer, trace in zip(writers, fan.traces, strict=True):
                by_trace[trace.id] = writer.index
                writer.last_trace = trace.id
                trace.label = f"{NAMES[writer.index]}#{board.rounds}"
                trace.meta.update(
                    {"worker": writer.index, "name": NAMES[writer.index], "round": board.rounds}
                )
            chunks = [trace async for trace in fan]
        chunks.sort(key=lambda t: by_trace[t.id])
        board.rounds += 1
        longest = max(t.completion_tokens for t in chunks)
        board.used += max(1, longest)
        board.since_nudge += longest
        for writer, trace in zip(writers, chunks, strict=True):
            self._absorb(ctx, board, writer, trace)
            if board.answer is not None and cfg.stop_at_answer:
                break

    def _request(
        self, problem: Problem, ctx: RunContext, board: _Board, writer: _Writer, max_tokens: int
    ) -> GenerateRequest:
        cfg = self.config
        params: dict[str, Any] = {"max_tokens": max_tokens, "stop": (STEP_SEPARATOR,)}
        if cfg.temperature is not None:
            params["temperature"] = cfg.temperature
        if ctx.defaults.seed is not None:
            params["seed"] = ctx.defaults.seed + 1000 * board.rounds + writer.index
        return _view_request(problem, ctx, cfg, board, writer, "", params)

    def _absorb(self, ctx: RunContext, board: _Board, writer: _Writer, trace: Trace) -> None:
        """Add a chunk to the writer's text; close its step at a blank line after a sentence end."""
        cfg = self.config
        writer.text += trace.text
        if trace.finish_reason != "stop":
            return
        writer.text += STEP_SEPARATOR  # the server dropped the stop string (or the turn ended)
        ctx.emit_worker_text(trace.id, writer.index, NAMES[writer.index], STEP_SEPARATOR)
        step_text = writer.text[writer.step_start :]
        sep = ends_step(step_text, len(STEP_SEPARATOR))
        if sep is None:
            return
        finished = step_text[:sep]
        board.history.append(finished)
        writer.step_start += sep
        found = last_boxed(finished)
        if found is not None and cfg.stop_at_answer and board.answer is None:
            board.answer = found
            return
        writer.step += 1
        nudge = cfg.nudge_every > 0 and board.since_nudge >= cfg.nudge_every
        if nudge:
            board.since_nudge, board.nudges = 0, board.nudges + 1
        header = cfg.prompts.header(writer.index, writer.step, nudge=nudge)
        writer.text += header
        ctx.emit_worker_text(trace.id, writer.index, NAMES[writer.index], header)

    async def _finish(self, problem: Problem, ctx: RunContext, board: _Board) -> Trace:
        """Greedy, a few tokens, from the last worker's view with the finisher prompt appended."""
        cfg, last = self.config, board.writers[-1]
        params: dict[str, Any] = {"max_tokens": cfg.finisher_tokens, "temperature": 0.0}
        request = _view_request(problem, ctx, cfg, board, last, cfg.prompts.finisher, params)
        parents = [w.last_trace for w in board.writers if w.last_trace >= 0]
        trace = await ctx.sample(request, label="finisher", parents=parents)
        transcript = _flatten(board, cfg.prompts, None)
        trace.answer = finisher_answer(cfg.prompts.finisher, trace.text, transcript)
        board.answer = trace.answer
        return trace


def render_view(cfg: HogwildTextConfig, board: _Board, writer: _Writer) -> str:
    """The worker's view as text, in the order ``hogwild`` lists the segments."""
    prompts, others = cfg.prompts, [w for w in board.writers if w is not writer]
    if cfg.layout == "contiguous":
        return "".join(o.text + prompts.cut_marker for o in others) + writer.text
    history = prompts.past_header + "".join(board.history)
    if cfg.layout == "interleaved":
        return history + writer.text[writer.step_start :]
    unfinished = "".join(o.text[o.step_start :] + prompts.cut_marker for o in others)
    own = writer.text[writer.step_start :]
    return history + prompts.others_header + unfinished + prompts.own_header + own


def _view_request(
    problem: Problem,
    ctx: RunContext,
    cfg: HogwildTextConfig,
    board: _Board,
    writer: _Writer,
    suffix: str,
    params: dict[str, Any],
) -> GenerateRequest:
    system = cfg.prompts.system_text(cfg.workers)
    view = render_view(cfg, board, writer) + suffix
    caps = ctx.capabilities
    if caps.chat and caps.continue_final:
        messages = [
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=problem.question),
            ChatMessage(role="assistant", content=view),
        ]
        return ctx.request(messages=messages, continue_final=True, **params)
    return ctx.request(prompt=f"{system}\n\n{problem.question}\n\n{view}", **params)


def _flatten(board: _Board, prompts: HogwildPrompts, finisher: Trace | None) -> str:
    parts = list(board.history)
    for writer in board.writers:
        unfinished = writer.text[writer.step_start :]
        if unfinished.strip():
            parts.append(unfinished + prompts.cut_marker)
    if finisher is not None:
        parts.append(prompts.finisher + finisher.text)
    return "".join(parts)


def _metrics(board: _Board) -> dict[str, float]:
    return {
        "rounds": float(board.rounds),
        "sequential_budget_used": float(board.used),
        "finished_steps": float(len(board.history)),
        "nudges": float(board.nudges),
    }
