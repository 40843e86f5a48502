"""How verify_refine asks: solver calls are samples, verifier calls are traces of kind "score".

Kind "score" is what paragen's accounting names a verifier's work (``RunUsage``: "a reward
model's call, or the generator asked whether a step is correct"): its tokens, read and written,
go to ``usage.score_tokens`` and its calls to ``num_scores``, never to ``total_tokens`` or the
critical path, and every report (CLI summary, OpenTelemetry attributes, Prometheus counters, the
eval tables) already shows them. The verification budget counts the same tokens, so a budget
taken from one run's ``score_tokens`` means the same thing in the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from paragen import Fanout, RunContext
from paragen.types import ChatMessage, GenerateRequest, StrategyResult, Trace
from strategies._toolkit import overrides
from strategies._verify_rules import StopRule


@dataclass(slots=True)
class Calls:
    """One run's calls: sampling overrides, a distinct seed per call, the verification budget.

    A seeded run gives every call its own seed (the run's plus a running count): the authors
    verify an unchanged solution again after a pass, and the same seed would only repeat the report.
    """

    ctx: RunContext
    temperature: float | None
    max_tokens: int | None
    verify_tokens: int | None
    verdict_tokens: int | None
    budget: int | None
    spent: int = 0
    verifications: list[Trace] = field(default_factory=list)
    _count: int = 0

    def request(self, messages: Sequence[ChatMessage], label: str, n: int = 1) -> GenerateRequest:
        """The request of a call named ``label`` ("verify" and "verdict" take their token caps)."""
        cap = {"verify": self.verify_tokens, "verdict": self.verdict_tokens}.get(label, self.max_tokens)
        params = overrides(self.temperature, None, cap)
        if self.ctx.defaults.seed is not None:  # a fan-out's choice i adds i: the count steps over them
            params["seed"] = self.ctx.defaults.seed + self._count
        self._count += n
        return self.ctx.request(messages=messages, n=n, **params)

    @property
    def exhausted(self) -> bool:
        """No verification starts once the budget is spent (one may overrun it: a call in flight
        is never cut short)."""
        return self.budget is not None and self.spent >= self.budget

    async def solve(self, request: GenerateRequest, label: str, parents: Sequence[int] = ()) -> list[Trace]:
        """Solver calls: samples, ``request.n`` of them."""
        if request.n == 1:
            return [await self.ctx.sample(request, label=label, parents=parents)]
        async with self.ctx.fanout(request, label=label, parents=parents) as fan:
            return await _all(fan)

    async def score(self, request: GenerateRequest, label: str, parents: Sequence[int]) -> list[Trace]:
        """Verifier calls: traces of kind "score", ``request.n`` of them, charged to the budget."""
        async with self.ctx.fanout(request, label=label, parents=parents, kind="score") as fan:
            traces = await _all(fan)
        self.spent += sum(t.prompt_tokens + t.completion_tokens for t in traces)
        self.verifications.extend(traces)
        return traces


async def _all(fan: Fanout) -> list[Trace]:
    """A fan-out's traces in choice order (not the order they finished: that one varies)."""
    async for _ in fan:
        pass
    return fan.traces


def finish(
    calls: Calls, chosen: Trace | None, stop: StopRule, metrics: dict[str, float], text: str | None = None
) -> StrategyResult:
    """The result: ``chosen``'s answer and text (``text`` in its place where given; None answers
    nothing), the verification counts, and the stop rule (``details["stop_rule"]``, ``stop_<rule>``)."""
    found = {
        **metrics,
        "verifications": float(sum(t.label == "verify" for t in calls.verifications)),
        "verification_tokens": float(calls.spent),
        f"stop_{stop}": 1.0,
    }
    if chosen is None:
        result = calls.ctx.finish(None, metrics=found)
    else:
        body = chosen.text if text is None else text
        result = calls.ctx.finish(chosen.answer, text=body, reasoning=chosen.reasoning, metrics=found)
    result.details["stop_rule"] = stop
    return result
