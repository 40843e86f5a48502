"""ctx.score: a verifier's call is a trace of kind "score", counted apart, opened once,
cancelled with the run.
The verifier's own tests are in tests/scoring."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from paragen import (
    BaseStrategy,
    ConfigError,
    Orchestrator,
    Problem,
    RunContext,
    ScoreRequest,
    Scorers,
    StepScores,
    StrategyConfig,
    StrategyResult,
)
from paragen.backends.base import Capabilities
from paragen.backends.scripted import ScriptedBackend
from paragen.scoring import ScorerError, ScorerKind
from paragen.types import GenerateRequest

pytestmark = pytest.mark.anyio


class CountingScorer:
    """Scores each step by its length / 10, after ``delay`` seconds; remembers what it was asked."""

    name = "counting"
    kind: ScorerKind = "prm"

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.requests: list[ScoreRequest] = []
        self.cancelled = 0
        self.closed = False

    async def score(self, request: ScoreRequest) -> StepScores:
        self.requests.append(request)
        try:
            await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        if self.fail:
            raise ScorerError("the reward server is down")
        return StepScores(
            steps=tuple(len(s) / 10 for s in request.steps), prompt_tokens=7, count_source="server"
        )

    async def aclose(self) -> None:
        self.closed = True


class ScoreConfig(StrategyConfig):
    verifier: str = "llm"
    whole: bool = False


class ScoreOnce(BaseStrategy[ScoreConfig]):
    """One sample, then its steps scored by the configured verifier."""

    name = "score_once"
    Config = ScoreConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(prompt=problem.question))
        scores = await ctx.score(
            trace.text.split("\n\n"),
            verifier=self.config.verifier,
            whole=self.config.whole,
            parents=[trace.id],
        )
        trace.scores = list(scores.steps)
        return ctx.finish(trace.text, metrics={"score": scores.last})


def verifier_says(verdict: str) -> Any:
    def respond(request: GenerateRequest, index: int) -> str:
        messages = request.messages or ()
        asked = bool(messages) and "Answer with one word: Yes or No." in messages[-1].content
        return verdict if asked else "step one\n\nso 4"

    return respond


async def test_a_scorers_call_is_a_trace_of_its_own_counted_apart() -> None:
    scorer = CountingScorer()
    async with Orchestrator(
        ScriptedBackend(verifier_says("Yes")), scorers=Scorers({"counting": scorer})
    ) as orch:
        result = await orch.run(ScoreOnce(verifier="counting"), Problem(question="2+2?"))
    sample, score = result.traces
    assert (score.kind, score.parents, score.prompt_tokens, score.count_source) == (
        "score",
        [sample.id],
        7,
        "server",
    )
    assert score.meta == {"verifier": "counting", "scores": [0.8, 0.4]}
    assert sample.scores == [0.8, 0.4]
    assert scorer.requests == [ScoreRequest(question="2+2?", steps=("step one", "so 4"))]
    usage = result.usage
    assert (usage.num_scores, usage.score_tokens, usage.num_samples) == (1, 7, 1)
    assert usage.total_tokens == sample.completion_tokens  # the verifier's tokens are not generated ones
    assert not scorer.closed  # a given scorer is its giver's to close


@pytest.mark.parametrize(("verdict", "expected"), [("Yes", 0.905), ("No", 0.095), ("Maybe", 0.5)])
async def test_the_llm_verifier_reads_the_yes_probability(verdict: str, expected: float) -> None:
    # The scripted backend gives the first token a logprob of -0.1: p = 0.905.
    async with Orchestrator(ScriptedBackend(verifier_says(verdict))) as orch:
        result = await orch.run(ScoreOnce(), Problem(question="2+2?"))
    sample, score = result.traces
    assert score.kind == "score" and score.parents == [sample.id] and score.completion_tokens == 1
    assert result.metrics["score"] == pytest.approx(expected, abs=1e-3)
    assert result.usage.score_tokens == score.prompt_tokens + 1 and result.usage.num_scores == 1


async def test_the_llm_verifier_needs_logprobs() -> None:
    backend = ScriptedBackend(verifier_says("Yes"), capabilities=Capabilities(logprobs=False))
    async with Orchestrator(backend) as orch:
        with pytest.raises(ConfigError, match="needs a backend that returns logprobs"):
            await orch.run(ScoreOnce(), Problem(question="2+2?"))
    assert backend.calls == 0  # refused when the run opens, not after the samples were paid for


async def test_a_failing_scorer_ends_the_run_as_a_backend_error() -> None:
    scorers = Scorers({"down": CountingScorer(fail=True)})
    async with Orchestrator(ScriptedBackend(verifier_says("Yes")), scorers=scorers) as orch:
        result = await orch.run(ScoreOnce(verifier="down"), Problem(question="2+2?"))
    assert result.stop_reason == "error" and "reward server is down" in (result.error or "")
    assert result.traces[-1].kind == "score" and result.traces[-1].status == "error"


async def test_a_deadline_cancels_a_scorers_call() -> None:
    from paragen import Budget

    scorer = CountingScorer(delay=30.0)
    orch = Orchestrator(
        ScriptedBackend(verifier_says("Yes")),
        scorers=Scorers({"slow": scorer}),
        budget=Budget(deadline_s=0.2),
    )
    with anyio.fail_after(5):
        result = await orch.run(ScoreOnce(verifier="slow"), Problem(question="2+2?"))
    assert result.stop_reason == "deadline" and scorer.cancelled == 1
    assert result.traces[-1].kind == "score" and result.traces[-1].status == "cancelled"


async def test_an_unknown_verifier_is_refused_when_the_run_opens() -> None:
    backend = ScriptedBackend(verifier_says("Yes"))
    async with Orchestrator(backend) as orch:
        with pytest.raises(ConfigError, match="unknown scorer 'bogus:x'"):
            await orch.run(ScoreOnce(verifier="bogus:x"), Problem(question="2+2?"))
    assert backend.calls == 0  # refused before any sample


async def test_a_pool_opens_each_spec_once_and_closes_what_it_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    import paragen.scoring.pool as pool

    built: list[CountingScorer] = []

    def fake_build(spec: str) -> CountingScorer:
        built.append(CountingScorer())
        return built[-1]

    monkeypatch.setattr(pool, "build_scorer", fake_build)
    async with Orchestrator(ScriptedBackend(verifier_says("Yes"))) as orch:
        for _ in range(3):
            await orch.run(ScoreOnce(verifier="engine:/some/prm"), Problem(question="2+2?"))
    assert len(built) == 1 and built[0].closed and len(built[0].requests) == 3


async def test_a_scorer_given_in_python_is_named_custom() -> None:
    from strategies.weighted_bon import WeightedBoN

    scorer = CountingScorer()
    backend = ScriptedBackend(verifier_says("Yes"))
    async with Orchestrator(backend, scorers=Scorers({"custom:mine": scorer})) as orch:
        result = await orch.run(WeightedBoN(n=2, verifier="custom:mine"), Problem(question="2+2?"))
    assert result.usage.num_scores == 2 and len(scorer.requests) == 2
    async with Orchestrator(backend) as orch:  # named but not given: refused when the run opens
        with pytest.raises(ConfigError, match="no scorer was given under 'custom:other'"):
            await orch.run(WeightedBoN(n=2, verifier="custom:other"), Problem(question="2+2?"))


class OpensAndFails(CountingScorer):
    async def open(self) -> None:
        raise ScorerError("no model at /some/prm")


async def test_a_scorer_whose_open_fails_is_closed_and_opened_again_next_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import paragen.scoring.pool as pool

    built: list[CountingScorer] = []

    def fake_build(spec: str) -> CountingScorer:
        built.append(OpensAndFails())
        return built[-1]

    monkeypatch.setattr(pool, "build_scorer", fake_build)
    scorers = Scorers()
    for _ in range(2):
        with pytest.raises(ScorerError, match="no model"):
            await scorers.get("engine:/some/prm")
    assert len(built) == 2 and all(s.closed for s in built)  # nothing half-opened is left behind


async def test_a_pool_with_an_allow_list_opens_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    import paragen.scoring.pool as pool

    monkeypatch.setattr(pool, "build_scorer", lambda spec: CountingScorer())
    scorers = Scorers({"custom:given": CountingScorer()}, allowed=["engine:/served/prm"])
    assert isinstance(await scorers.get("engine:/served/prm"), CountingScorer)
    assert isinstance(await scorers.get("custom:given"), CountingScorer)
    for spec in ("engine:/etc", "vllm-server:http://internal:8000", "scripted:/etc/passwd"):
        with pytest.raises(ConfigError, match="is not served here"):
            await scorers.get(spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vllm-server:http://x?timeout=soon", "could not convert"),
        ("vllm-server:http://x?transport=mock", "transport is not a spec option"),
        ("vllm-server:http://x?colour=red", "unexpected keyword"),
    ],
)
def test_a_bad_scorer_option_is_one_config_error(spec: str, message: str) -> None:
    from paragen.scoring.pool import build_scorer

    with pytest.raises(ConfigError, match=message):
        build_scorer(spec)
