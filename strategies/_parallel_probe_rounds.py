"""Parallel-Probe's rounds in a live run: hold each branch at the round's token count, probe it,
and let the controller (:mod:`strategies._parallel_probe_rules`) decide once every running branch
has answered or finished; then cancel whom it drops, or everyone when it stops."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from paragen import Fanout, LiveSample, RunContext
from paragen.answers import answer_key
from paragen.types import StrategyResult, Trace
from strategies._parallel_probe_rules import Answer, ProbeParams, ProbeRules, RoundDecision
from strategies.dynasor import boxed_prefix

ProbeCall = Callable[[LiveSample], Awaitable[Trace]]
"""Asks a running branch for its answer so far: ``ctx.probe`` with the strategy's probe settings."""

PRUNED = "pruned by probe"
CANCEL_REASONS = {"stable": "majority stable", "round limit": "round limit"}


class Rounds:
    """One run's round barrier: the answers of the round in progress and every decision so far."""

    def __init__(
        self, params: ProbeParams, interval: int, probe: ProbeCall, ctx: RunContext, fan: Fanout
    ) -> None:
        self._interval = interval
        self._ask = probe
        self._ctx = ctx
        self._fan = fan
        # Branch order is request order: the order the vote breaks ties in, as the simulator's.
        self.rules = ProbeRules(params, tuple(trace.id for trace in fan.traces))
        self.decisions: list[RoundDecision] = []
        self._answers: dict[int, Answer] = {}  # the round in progress: running branch -> probe answer
        self._done = anyio.Event()  # set when the round in progress is decided
        self._spelling: dict[str, str] = {}  # answer key -> the first answer text that had it
        self._ended: list[Trace] = []
        self._probes = 0

    @property
    def outcome(self) -> RoundDecision | None:
        last = self.decisions[-1] if self.decisions else None
        return last if last is not None and last.stop is not None else None

    def _due_at(self) -> int:
        """The token count of the round in progress: ``(r + 2) * interval`` (module docstring)."""
        return (self.rules.round + 2) * self._interval

    async def watch(self, live: LiveSample) -> None:
        """A branch's monitor: at the round's token count, probe it and wait for the decision (a
        delta of several tokens may pass more than one round's count: each is probed in turn)."""
        branch = live.trace.id
        while self._due(live):
            round_index, done = self.rules.round, self._done
            self._answers[branch] = await self._probe(live, round_index)
            await self._decide_if_complete()
            await done.wait()  # a branch cancelled by the decision is cancelled here
            if branch in self.decisions[round_index].dropped:
                return

    def _due(self, live: LiveSample) -> bool:
        """Whether a running branch (not finished, dropped, nor stopped) reached the round's count."""
        # Called after every delta: the token count first, the rest only once it is reached.
        return (
            live.num_tokens >= self._due_at()
            and not live.finished
            and self.outcome is None
            and live.trace.id in self.rules.running
        )

    async def ended(self, trace: Trace) -> None:
        """A branch ended (its answer filled in): from now it votes with that answer, unless it was
        dropped or the run is over. Its end may complete the round the others wait in."""
        self._ended.append(trace)
        if self.outcome is not None:
            return
        self._answers.pop(trace.id, None)  # cancelled mid-round (a deadline): no probe answer stands
        self.rules.finish(trace.id, self._key(trace.answer))
        await self._decide_if_complete()

    async def _probe(self, live: LiveSample, round_index: int) -> Answer:
        at = live.num_tokens
        probe = await self._ask(live)
        self._probes += 1
        probe.answer = boxed_prefix(probe.text) if probe.is_ok else None
        probe.meta.update(at=at, round=round_index)
        return self._key(probe.answer)

    def _key(self, answer: str | None) -> Answer:
        """The voting key of an answer (None: no answer), its first spelling kept for the result."""
        if answer is None:
            return None
        key = answer_key(answer)
        self._spelling.setdefault(key, answer)
        return key

    async def _decide_if_complete(self) -> None:
        if self.outcome is not None or set(self._answers) != set(self.rules.running):
            return
        decision = self.rules.step(self._answers)
        self.decisions.append(decision)
        self._answers = {}
        done, self._done = self._done, anyio.Event()
        done.set()
        self._ctx.emit(
            "parallel_probe round",
            round=decision.round,
            majority=decision.majority,
            dropped=sorted(decision.dropped),
            stop=decision.stop,
        )
        # Dropped ones first: a stop in the same round must not relabel them.
        for branch in sorted(decision.dropped):
            await self._fan.stop(branch, PRUNED, pruned=True)
        if decision.stop in CANCEL_REASONS:
            await self._fan.cancel(CANCEL_REASONS[decision.stop])

    def result(self) -> StrategyResult:
        """The last decision's majority (spelled as first seen), with the round accounting."""
        outcome = self.outcome
        key = outcome.majority if outcome is not None else None
        answer = None if key is None else self._spelling.get(key, key)
        ended = (t for t in self._ended if key is not None and t.is_ok and self._key(t.answer) == key)
        chosen = next(ended, None)
        dropped = {branch: d.round for d in self.decisions for branch in d.dropped}
        metrics = {
            "rounds": float(len(self.decisions)),
            "stop_round": float(outcome.round if outcome is not None and outcome.stop == "stable" else -1),
            "dropped": float(len(dropped)),
            "probes": float(self._probes),
        }
        result = self._ctx.finish(
            answer,
            text=None if chosen is None else chosen.text,
            reasoning=None if chosen is None else chosen.reasoning,
            metrics=metrics,
        )
        result.metrics["sequential_tokens"] = float(result.usage.sequential_tokens)
        result.details.update(stop=None if outcome is None else outcome.stop, dropped_at_round=dropped)
        return result
