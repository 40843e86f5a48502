"""A scorer that follows a rule, for tests and benchmarks: no model, a fixed latency per call.

    scorer = ScriptedScorer({"x = 2": 0.9, "x = 3": 0.1}, latency=0.02)   # by last step text
    scorer = ScriptedScorer(lambda req: 0.5 + 0.1 * len(req.steps), kind="orm")

A rule is a callable on the :class:`ScoreRequest` returning one float or one float per step,
or a mapping from a step's text (stripped) to its score. A PRM whose rule gives one float is
asked once per prefix of the steps, so every step gets the score its own text earns, as a real
PRM scores each step in context. Its latency is a sleep (on the event loop's timer, or
``precise``: see :func:`paragen._timing.sleep_until`): a call cancelled mid-way (the
run cancelled, a beam dropped) ends at once, as a real scorer's request must.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio

from paragen._timing import sleep_until
from paragen.errors import ConfigError
from paragen.scoring.base import ScoreRequest, ScorerError, ScorerKind, StepScores

Rule = Callable[[ScoreRequest], float | Sequence[float]] | Mapping[str, float]


class ScriptedScorer:
    """Scores from a rule after ``latency`` seconds; counts its calls (started, finished, cancelled)."""

    def __init__(
        self,
        rule: Rule,
        *,
        kind: ScorerKind = "prm",
        latency: float = 0.0,
        default: float = 0.0,
        name: str = "scripted",
        precise: bool = False,
    ) -> None:
        if latency < 0:
            raise ValueError(f"latency must be >= 0, got {latency}")
        self.name = name
        self._kind: ScorerKind = kind
        self._rule = rule
        self._default = default
        self.latency = latency
        self._precise = precise
        self.calls = 0
        self.finished = 0
        self.cancelled = 0
        self.requests: list[ScoreRequest] = []

    @property
    def kind(self) -> ScorerKind:
        return self._kind

    async def score(self, request: ScoreRequest) -> StepScores:
        self.calls += 1
        self.requests.append(request)
        start = time.perf_counter()
        # The rule runs first and the sleep takes what is left: a call lasts ``latency`` in all,
        # as a served reward model's would, and a benchmark's critical path is exactly its latency.
        steps = self._scores(request)
        words = sum(len(s.split()) for s in (request.question, *request.steps))
        try:
            await sleep_until(start + self.latency, precise=self._precise)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        self.finished += 1
        return StepScores(steps=steps, prompt_tokens=words, count_source="estimate")

    def _scores(self, request: ScoreRequest) -> tuple[float, ...]:
        if self._kind == "orm":
            found = self._apply(request)
            if len(found) != 1:
                raise ScorerError(f"an ORM's rule must give one score, got {len(found)}")
            return found
        found = self._apply(request)
        if len(found) == len(request.steps):
            return found
        if len(found) != 1:
            raise ScorerError(f"a PRM's rule gave {len(found)} scores for {len(request.steps)} steps")
        # One float: the rule scores the last step; earlier steps get what their own prefix earns.
        # The prefixes of a valid request are valid: built without validating again (a benchmark's hot path).
        prefixes = (
            ScoreRequest.model_construct(question=request.question, steps=request.steps[: i + 1])
            for i in range(len(request.steps) - 1)
        )
        return (*(self._apply(p)[0] for p in prefixes), found[0])

    def _apply(self, request: ScoreRequest) -> tuple[float, ...]:
        rule = self._rule
        if isinstance(rule, Mapping):
            return (float(rule.get(request.steps[-1].strip(), self._default)),)
        value = rule(request)
        if isinstance(value, int | float):
            return (float(value),)
        return tuple(float(v) for v in value)

    async def aclose(self) -> None:
        return None


def scorer_from_file(target: str, **options: str) -> ScriptedScorer:
    """``scripted:FILE.json[?kind=orm&latency=0.02&default=0.5]``: step text -> score, from a JSON object."""
    path = Path(target)
    if not path.is_file():
        raise ConfigError(
            f"scripted scorer: no JSON file at {target!r}", hint="give a {step text: score} object"
        )
    table = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(table, dict) or not all(isinstance(v, int | float) for v in table.values()):
        raise ConfigError(f"scripted scorer: {target!r} is not a JSON object of step text -> number")
    unknown = set(options) - {"kind", "latency", "default"}
    if unknown:
        raise ConfigError(
            f"scripted scorer: unknown options {sorted(unknown)}", hint="kind, latency, default"
        )
    kind = options.get("kind", "prm")
    if kind not in ("prm", "orm"):
        raise ConfigError(f"scripted scorer: kind must be prm or orm, got {kind!r}")
    return ScriptedScorer(
        {str(k).strip(): float(v) for k, v in table.items()},
        kind="orm" if kind == "orm" else "prm",
        latency=float(options.get("latency", 0.0)),
        default=float(options.get("default", 0.0)),
        name=f"scripted:{target}",
    )


__all__ = ["Rule", "ScriptedScorer", "scorer_from_file"]
