"""Weighted best-of-N, the weighted vote's arithmetic, the scripted scorer and the search configs."""

from __future__ import annotations

import json
from pathlib import Path as FilePath
from typing import Any

import anyio
import pytest
from search_helpers import VERIFIER, run_search, score_traces

from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.registry import load_strategy
from paragen.scoring import ScoreRequest, ScorerError, Scorers, ScriptedScorer, build_scorer
from paragen.strategy import build_strategy, count_field
from strategies._search_common import Path, answer_weight, split_steps
from strategies.weighted_bon import WeightedBoN, WeightedBoNConfig

# Four solutions; the first step of each sets its answer's fate. Scores per step text. Finishing
# 15 ms apart: a loaded machine's late wake-ups (a few ms) cannot change the order they finish in.
SOLUTIONS = [
    Script(text="good start\n\nso \\boxed{5}", token_delay=0.02),
    Script(text="odd start\n\nso \\boxed{7}", token_delay=0.005),
    Script(text="fine start\n\nso \\boxed{5}", token_delay=0.015),
    Script(text="great start\n\nso \\boxed{7}", token_delay=0.01),
]
# Binary fractions, so the ties below are exact. Finishing order: odd, great, fine, good.
STEP_SCORES = {"good start": 0.5, "odd start": 0.875, "fine start": 0.25, "great start": 0.25}
STEP_SCORES |= {"so \\boxed{5}": 0.75, "so \\boxed{7}": 0.5}


async def bon(**options: Any) -> tuple[float, str | None]:
    result, _, _ = await run_search(
        WeightedBoN(n=4, verifier=VERIFIER, **options),
        ScriptedBackend(SOLUTIONS, order="fanout"),
        STEP_SCORES,
    )
    return result.metrics.get("winner_weight", 0.0), result.answer


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("aggregate", "weighting", "answer", "weight"),
    [
        ("last", "sum", "5", 1.5),  # 5: .75 + .75; 7: .5 + .5
        ("min", "sum", "7", 0.75),  # 5: .5 + .25; 7: .5 + .25 (a tie: 7 finished first)
        ("prod", "sum", "7", 0.5625),  # 5: .375 + .1875; 7: .4375 + .125 (a tie again)
        ("min", "max", "7", 0.5),  # the single best: good and odd (.5 each), odd finished first
        ("last", "max", "5", 0.75),  # the two 5s (.75), the first of them
    ],
)
async def test_weighted_vote_per_aggregate(
    aggregate: str, weighting: str, answer: str, weight: float
) -> None:
    found_weight, found = await bon(aggregate=aggregate, weighting=weighting)
    assert found == answer and found_weight == pytest.approx(weight)


@pytest.mark.anyio
@pytest.mark.parametrize(("weighting", "answer"), [("sum", "5"), ("max", "5")])
async def test_ties_in_sample_order_go_to_the_first_sample_as_search_and_learn(
    weighting: str, answer: str
) -> None:
    # min: good .5 and odd .5, fine .25 and great .25; in sample order good (5) comes first
    _, found = await bon(aggregate="min", weighting=weighting, ties="sample")
    assert found == answer


@pytest.mark.anyio
async def test_each_sample_is_scored_as_it_finishes_and_keeps_its_scores() -> None:
    result, _, scorer = await run_search(
        WeightedBoN(n=4, verifier=VERIFIER), ScriptedBackend(SOLUTIONS, order="fanout"), STEP_SCORES
    )
    samples = [t for t in result.traces if t.kind == "sample"]
    scores = score_traces(result)
    assert [t.scores for t in samples] == [[0.5, 0.75], [0.875, 0.5], [0.25, 0.75], [0.25, 0.5]]
    assert sorted(s.parents for s in scores) == [[t.id] for t in samples]
    assert scorer.requests[0].steps == ("odd start", "so \\boxed{7}")  # the fastest first
    slowest = samples[0]
    first_score = next(s for s in scores if s.parents == [samples[1].id])
    assert first_score.end is not None and slowest.end is not None and first_score.end < slowest.end
    assert result.usage.num_scores == 4 and result.usage.score_tokens == sum(s.prompt_tokens for s in scores)
    assert result.usage.total_tokens == sum(t.completion_tokens for t in samples)  # scores apart


def test_answer_weight_and_steps() -> None:
    paths = [Path(("x",), (0,), (0.5, 0.2), True, "1"), Path(("y",), (1,), (0.9,), True, "1.0")]
    paths.append(Path(("z",), (2,), (0.7,), True, None))
    cfg = WeightedBoNConfig(aggregate="prod")
    assert answer_weight(paths, "1", cfg) == pytest.approx(0.1 + 0.9)
    assert answer_weight(paths, "1", cfg.model_copy(update={"weighting": "max"})) == pytest.approx(0.9)
    assert split_steps("a\n\n \n\nb\n\n", "\n\n") == ("a", "b")
    assert split_steps("  ", "\n\n") == ("  ",)


@pytest.mark.anyio
async def test_scripted_scorer_rules() -> None:
    request = ScoreRequest(question="q", steps=("a", "bb", "c"))
    by_text = ScriptedScorer({"a": 0.1, "bb": 0.2}, default=0.5)
    assert (await by_text.score(request)).steps == (0.1, 0.2, 0.5)
    per_prefix = ScriptedScorer(lambda r: len(r.steps[-1]) / 10)
    assert (await per_prefix.score(request)).steps == pytest.approx((0.1, 0.2, 0.1))
    listed = ScriptedScorer(lambda r: [0.3] * len(r.steps))
    assert (await listed.score(request)).steps == (0.3, 0.3, 0.3)
    orm = ScriptedScorer(lambda r: float(len(r.steps)), kind="orm")
    verdict = await orm.score(request)
    assert verdict.steps == (3.0,) and verdict.last == 3.0 and verdict.prompt_tokens == 4
    with pytest.raises(ScorerError):
        await ScriptedScorer(lambda r: [0.1, 0.2]).score(request)
    with pytest.raises(ScorerError):
        await ScriptedScorer(lambda r: [0.1, 0.2], kind="orm").score(request)
    assert per_prefix.calls == 1 and per_prefix.requests == [request] and orm.kind == "orm"


@pytest.mark.anyio
async def test_scripted_scorer_latency_is_cancellable() -> None:
    scorer = ScriptedScorer({}, latency=10.0)
    with anyio.move_on_after(0.02):
        await scorer.score(ScoreRequest(question="q", steps=("a",)))
    assert (scorer.calls, scorer.finished, scorer.cancelled) == (1, 0, 1)


@pytest.mark.anyio
async def test_scripted_scorer_from_a_file(tmp_path: FilePath) -> None:
    table = tmp_path / "scores.json"
    table.write_text(json.dumps({"a": 0.25}))
    scorer = build_scorer(f"scripted:{table}?latency=0.001&default=0.5")
    assert (await scorer.score(ScoreRequest(question="q", steps=("a", "b")))).steps == (0.25, 0.5)
    pool = Scorers()
    assert (await pool.get(f"scripted:{table}?kind=orm")).kind == "orm"
    with pytest.raises(ConfigError, match="unknown options"):
        build_scorer(f"scripted:{table}?speed=1")
    with pytest.raises(ConfigError, match="no JSON file"):
        build_scorer(f"scripted:{tmp_path / 'none.json'}")


@pytest.mark.parametrize("name", ["weighted_bon", "beam_search", "dvts", "particle_filtering"])
def test_registered_with_n_as_their_count(name: str) -> None:
    cls = load_strategy(name)
    assert count_field(cls) == "n"
    strategy = build_strategy(name, {"n": 8, "verifier": "vllm-server:http://localhost:8000"})
    assert strategy.config.model_dump()["n"] == 8
    with pytest.raises(ConfigError, match="needs a target"):
        build_strategy(name, {"verifier": "engine"})
