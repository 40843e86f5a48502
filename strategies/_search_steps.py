"""One depth of a step-by-step search: every path proposes next steps, each scored as soon as it is written.

A next step is a continuation of the partial solution (the steps so far as a prefilled assistant
reply, ``continue_final``) that stops at the step delimiter. Each path's proposals are one fan-out
(``n`` = its expansions: one prefill for all of them on a backend with native n), and each proposal
is handed to the scorer the moment its sample ends, beside the samples still running: a depth
costs one generation plus one score on the critical path, not all generations then all scores.

A proposal ends its path when it boxes an answer, is empty (the model stopped at once, which the
delimiter's "stop" cannot be told apart from otherwise), was cut by ``step_max_tokens``
(search-and-learn counts "length" as finished too), was written at the depth limit, or used up the
run's ``max_tokens``: as in every strategy, that bounds one solution's length (here its steps
together), so a step asks for no more than the solution has left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from paragen import ChildTasks, Fanout, RunContext
from paragen.answers import extract_answer, last_boxed
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, GenerateRequest, Trace
from strategies._search_common import Path, StepFields


def check_continuation(ctx: RunContext) -> None:
    """Refuse, before any sample, a backend that cannot continue a partial solution."""
    ctx.require_continuation(
        "step-by-step search continues partial solutions: the backend must continue a prefilled reply"
    )


def step_request(
    ctx: RunContext, cfg: StepFields, question: str, path: Path, *, last: bool, seed: int | None
) -> GenerateRequest:
    """The next step of ``path``: the steps so far prefilled, stopped at the delimiter (unless ``last``)."""
    left = ctx.defaults.max_tokens - path.tokens
    params: dict[str, Any] = {"seed": seed, "max_tokens": left}
    if not last:
        params.update(stop=(*ctx.defaults.stop, cfg.delimiter), max_tokens=min(cfg.step_max_tokens, left))
    params.update(
        {k: v for k, v in (("temperature", cfg.temperature), ("top_p", cfg.top_p)) if v is not None}
    )
    messages = solve_messages(question)
    if not path.steps:
        return ctx.request(messages=messages, **params)
    prefix = ChatMessage(role="assistant", content=path.text(cfg.delimiter) + cfg.delimiter)
    return ctx.request(messages=[*messages, prefix], continue_final=True, **params)


def ends_path(trace: Trace, step: str, *, last: bool, spent: bool) -> bool:
    """Whether this step ends its path; ``spent``: the solution has used the run's max_tokens."""
    done = trace.finish_reason != "stop" or not step.strip() or last_boxed(step) is not None
    return last or spent or done


class StepSearch:
    """Grows paths one depth at a time for one run (see the module docstring)."""

    def __init__(self, ctx: RunContext, cfg: StepFields, question: str) -> None:
        self.ctx = ctx
        self.cfg = cfg
        self.question = question
        self.traces: dict[int, Trace] = {}  # the step samples, so decisions can be written on them
        self._requests = 0  # distinct seeds for every step request of the run

    async def expand(
        self,
        paths: Sequence[Path],
        m: int | Sequence[int],
        *,
        depth: int,
        label: str = "",
        stop_after: int | None = None,
    ) -> list[list[Path]]:
        """``m`` scored proposals per path, or ``m[i]`` for path i (fewer where samples failed or
        were stopped), by path.

        With ``stop_after``, once that many proposals ended their paths the samples still running
        are cancelled (reason "early-finish"); proposals already written are still scored.
        """
        counts = [m] * len(paths) if isinstance(m, int) else list(m)
        depth_run = _Depth(self, depth, label or f"depth{depth}", stop_after)
        async with self.ctx.concurrently() as children:
            for index, (path, count) in enumerate(zip(paths, counts, strict=True)):
                if count > 0:
                    # The request (its seed) is made here, in path order: made in its task, it would
                    # follow the order the event loop starts tasks in (trio shuffles it), and a
                    # seeded run would give its paths different seeds from one run to the next.
                    request = depth_run.request(path, count)
                    children.start(depth_run.grow, children, index, path, count, request)
        return [sorted(found, key=lambda p: p.last_id) for found in depth_run.found(len(paths))]

    def next_seed(self, count: int) -> int | None:
        """A base seed for ``count`` samples no other request of the run uses (None without a run seed)."""
        base = self.ctx.defaults.seed
        first, self._requests = self._requests, self._requests + count
        return None if base is None else base + first

    async def score(self, path: Path, label: str) -> Path:
        """``path`` with its step scores (and its answer if it ended); the new step's trace gets both."""
        cfg, trace = self.cfg, self.traces[path.last_id]
        verdict = await self.ctx.score(
            path.steps, verifier=cfg.verifier, question=self.question, parents=path.trace_ids, label=label
        )
        answer = extract_answer(path.text(cfg.delimiter)) if path.finished else None
        trace.scores, trace.answer = list(verdict.steps), answer
        return replace(path, scores=tuple(verdict.steps), answer=answer)


class _Depth:
    """The fan-outs of one depth and what they found."""

    def __init__(self, search: StepSearch, depth: int, label: str, stop_after: int | None) -> None:
        self.search, self.depth, self.label = search, depth, label
        self.stop_after = stop_after
        self.last = search.cfg.finish_at_limit and depth == search.cfg.max_depth - 1
        self.fans: list[Fanout] = []
        self.ended = 0
        self.stopped: str | None = None
        self.by_path: dict[int, list[Path]] = {}

    def found(self, count: int) -> list[list[Path]]:
        return [self.by_path.get(i, []) for i in range(count)]

    def request(self, path: Path, count: int) -> GenerateRequest:
        """The request for ``path``'s next ``count`` steps, with seeds of its own."""
        search = self.search
        seed = search.next_seed(count)
        return step_request(search.ctx, search.cfg, search.question, path, last=self.last, seed=seed)

    async def grow(
        self, children: ChildTasks, index: int, path: Path, count: int, request: GenerateRequest
    ) -> None:
        search = self.search
        async with search.ctx.fanout(request, n=count, label=self.label, parents=path.trace_ids[-1:]) as fan:
            self.fans.append(fan)
            if self.stopped is not None:  # an early finish came before this fan-out opened
                await fan.cancel(self.stopped)
            async for trace in fan:
                if trace.is_ok:
                    children.start(self.score, index, self.proposal(path, trace))
                    await self.maybe_stop()

    def proposal(self, path: Path, trace: Trace) -> Path:
        self.search.traces[trace.id] = trace
        step, tokens = trace.text, path.tokens + trace.completion_tokens
        spent = tokens >= self.search.ctx.defaults.max_tokens
        ended = ends_path(trace, step, last=self.last, spent=spent)
        self.ended += ended
        steps = path.steps if ended and not step.strip() and path.steps else (*path.steps, step)
        return Path(steps=steps, trace_ids=(*path.trace_ids, trace.id), finished=ended, tokens=tokens)

    async def maybe_stop(self) -> None:
        if self.stop_after is None or self.stopped is not None or self.ended < self.stop_after:
            return
        self.stopped = f"early-finish: {self.ended} paths ended at depth {self.depth}"
        self.search.ctx.emit("search: early finish", depth=self.depth, ended=self.ended)
        for fan in self.fans:
            await fan.cancel(self.stopped)

    async def score(self, index: int, path: Path) -> None:
        scored = await self.search.score(path, f"{self.label}/score")
        self.by_path.setdefault(index, []).append(scored)
