"""Parallel-Probe (Zheng et al., ICML 2026, arXiv 2602.03845): probe every branch each round,
drop the dissenters, stop once the majority holds still.

``n`` branches run at once. Every ``interval`` generated tokens a branch is probed (as Dynasor
probes: its text so far, then a phrase that opens ``\\boxed{``, continued for at most
``probe_tokens`` tokens; the answer is the text up to the ``}`` that closes it, none if it never
closes). A round is complete once every running branch has been probed at that round's token
count or has finished; :mod:`strategies._parallel_probe_rules` then decides, as the authors'
simulator does: the majority over the branches not dropped (a finished one votes with its final
answer), a running branch dropped after disagreeing with it ``patience`` rounds in a row (not in
the first ``warmup`` rounds), and a stop once the same majority came ``stable`` rounds after it
first came, answering it. Without such a stop the run answers the last round's majority once every
branch finished or was dropped (or after ``max_rounds`` rounds).

Why rounds wait: live branches run at different speeds, but the simulator reads one column of its
probe matrix per step, every branch at the same token count. A branch that reaches the round's
token count waits there (its monitor holds it) until the slower ones have been probed or finished,
so each decision sees the answers the simulator would, and a dropped branch spends no tokens past
the round that dropped it. Round ``r`` (from 0) probes at ``(r + 2) * interval`` tokens: the
simulator's first probe, at ``interval`` (``probe_new``), is voted on only by a branch already
finished, so it is not made. A dropped branch ends "pruned" (``cancel_reason`` "pruned by probe");
a stop cancels the rest ("majority stable", or "round limit").

Defaults are the main table's (64 branches, probes every 500 tokens, S = 40, P = 7, warmup 15;
``evaluation/evaluation_main_table.py``); the simulator class's own defaults are S = 14, P = 8,
warmup 10, and ``max_steps`` 100 (inherited from ``ParallelEST``). docs/faithfulness.md compares
each decision with zhengkid/Parallel-Probe's ``evaluation/method.py``.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import Field

from paragen import BaseStrategy, LiveSample, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount
from strategies._parallel_probe_rounds import ProbeCall, Rounds
from strategies._parallel_probe_rules import ProbeParams
from strategies._toolkit import annotate, overrides, solve_request
from strategies.dynasor import PROBE_TEXT


class ParallelProbeConfig(StrategyConfig):
    n: int = Field(default=64, ge=1, le=1024, description="branches (the paper's N; main table 64)")
    interval: TokenCount = Field(default=500, description="tokens between probes of a branch (paper: 500)")
    stable: int = Field(
        default=40, ge=1, description="S: stop once one majority came this many rounds after it first came"
    )
    patience: int = Field(
        default=7,
        ge=1,
        description="P: drop a branch that disagrees with the majority P rounds in a row",
    )
    warmup: int = Field(default=15, ge=0, description="rounds (from the first) in which no branch is dropped")
    max_rounds: int | None = Field(
        default=100,
        ge=1,
        description="end after this many rounds (simulator: max_steps); None = no limit",
    )
    probe_tokens: TokenCount = Field(default=20, description="tokens a probe may decode")
    probe_text: str = Field(default=PROBE_TEXT, description="appended to a branch's text to probe it")
    probe_temperature: float | None = Field(default=None, ge=0, description="None = the branch's own")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = Field(default=None, description="per branch; None = run default")
    extract: ExtractMode = "auto"


class ParallelProbe(BaseStrategy[ParallelProbeConfig]):
    """n branches probed in rounds; dissenters dropped; stop once the majority is stable."""

    name = "parallel_probe"
    Config = ParallelProbeConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        ctx.require_continuation(
            "parallel_probe probes a branch by continuing its text, which this backend cannot do"
        )
        rounds: Rounds | None = None

        async def monitor(live: LiveSample) -> str | None:
            assert rounds is not None  # set before any task of the fan-out runs
            await rounds.watch(live)  # a dropped or stopped branch is cancelled, not returned a reason
            return None

        async with ctx.fanout(self._requests(ctx, problem), monitor=monitor) as fan:
            # No await since the fan-out opened: its samples have not run a step yet.
            rounds = Rounds(self._params(), self.config.interval, self._probe_call(ctx), ctx, fan)
            async for trace in fan:
                await rounds.ended(annotate(trace, self.config.extract))
        return rounds.result()

    def _params(self) -> ProbeParams:
        cfg = self.config
        return ProbeParams(cfg.stable, cfg.patience, cfg.warmup, cfg.max_rounds)

    def _probe_call(self, ctx: RunContext) -> ProbeCall:
        """Dynasor's probe with this run's settings: the branch's own sampling unless
        ``probe_temperature`` is set, and no stop strings (the box's ``}`` ends the answer)."""
        cfg = self.config
        params: dict[str, Any] = {"stop": ()}
        if cfg.probe_temperature is not None:
            params["temperature"] = cfg.probe_temperature
        return functools.partial(ctx.probe, text=cfg.probe_text, max_tokens=cfg.probe_tokens, **params)

    def _requests(self, ctx: RunContext, problem: Problem) -> list[GenerateRequest]:
        """One request per branch, so a branch held at a round's token count holds no other."""
        cfg = self.config
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        seed = ctx.defaults.seed
        return [
            solve_request(ctx, problem.question, **params, **({} if seed is None else {"seed": seed + i}))
            for i in range(cfg.n)
        ]
