"""PDR / SR: distill operators and workspace bounding (pure), rounds and budgets on the scripted backend."""

from __future__ import annotations

import random

import pytest
from strategy_helpers import PROBLEM, run, samples, words

from paragen import registry
from paragen._context import RunContext
from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.errors import ConfigError
from paragen.types import GenerateRequest
from strategies._distill import (
    Draft,
    agreement_scores,
    bounded,
    fit_to_budget,
    per_sample_topk,
    random_k,
    shared_topk,
    top_k,
)
from strategies.deepprune import DeepPrune
from strategies.ffs import FFS
from strategies.pdr import PDR, SR, paper_budgets, refine_question


def test_agreement_scores_and_top_k() -> None:
    scores = agreement_scores(["4", "5", "4.0", None, "4"])
    assert scores == [pytest.approx(0.5), 0.0, pytest.approx(0.5), 0.0, pytest.approx(0.5)]
    assert top_k(scores, 2) == [0, 2]
    assert top_k([1.0, 1.0, 0.5], 1, tiebreak=[0.1, 0.9, 0.0]) == [1]


def test_selectors_shape_and_spread() -> None:
    scores = [1.0, 1.0, 1.0, 0.0]
    rng = random.Random(3)
    assert shared_topk(scores, 2, 3, rng) == [[0, 1]] * 3
    per = per_sample_topk(scores, 1, 8, rng)
    assert all(p[0] in (0, 1, 2) for p in per) and len({p[0] for p in per}) > 1  # ties spread across samples
    rand = random_k(scores, 2, 4, rng)
    assert all(len(set(p)) == 2 for p in rand)


def test_fit_to_budget_keeps_short_pieces_and_the_ends_of_long_ones() -> None:
    pieces = ["short one", "x " * 50 + "END"]
    out = fit_to_budget(pieces, [2, 51], kappa=12)
    assert out[0] == "short one" and out[1].endswith("END") and len(out[1]) < len(pieces[1])


def test_paper_budgets_count_inputs_and_only_the_accepted_path() -> None:
    rounds = [[Draft("a", "1", [0], 10, 5), Draft("b", "1", [1], 10, 9)], [Draft("c", "1", [3], 30, 4)]]
    distill = [Draft("s", None, [2], 20, 6)]
    assert paper_budgets(rounds, distill) == (19 + 34 + 26, 15 + 19 + 34 + 26)


def test_parallelism_must_end_with_one() -> None:
    with pytest.raises(ConfigError):
        PDR(parallelism=(4, 2))
    assert refine_question("Q?", None) == "Q?" and "Attempt" in refine_question("Q?", "Attempt 1:\nx")


@pytest.mark.anyio
async def test_bounded_workspace_respects_kappa_by_token_count() -> None:
    ctx = RunContext(ScriptedBackend([Script(text="x")]), PROBLEM)
    drafts = [words(80, "4"), words(60, "5"), words(5, "6")]
    text = await bounded(ctx, drafts, kappa=30)
    assert len(tokenize(text)) <= 30
    assert "\\boxed{4}" in text and "\\boxed{5}" in text and "\\boxed{6}" in text  # the ends survive


class _CountingBackend(ScriptedBackend):
    """Counts count_tokens calls and gives up after many: a trim loop that makes no progress ends here."""

    calls = 0

    async def count_tokens(self, text: str) -> tuple[int, str]:
        self.calls += 1
        if self.calls > 500:
            raise AssertionError("bounded() is not making progress")
        return await super().count_tokens(text)


@pytest.mark.anyio
async def test_bounded_workspace_ends_with_drafts_shorter_than_ten_characters() -> None:
    backend = _CountingBackend([Script(text="x")])
    ctx = RunContext(backend, PROBLEM)
    # the "Attempt i:" headers alone cost more than kappa, and 10% of a short draft is no characters
    text = await bounded(ctx, ["7 + 5", "= 12", "twelve"], kappa=4)
    assert len(tokenize(text)) <= 4
    kept = await bounded(ctx, ["so it is 12", "12"], kappa=5)
    assert len(tokenize(kept)) <= 5 and kept.startswith("Attempt 1:")


def _responder(request: GenerateRequest, index: int) -> Script:
    content = request.messages[-1].content if request.messages else ""
    if "earlier attempts" in content:
        return Script(text="refined so \\boxed{5}", token_delay=0.01)
    if content.startswith("Below are several attempts"):
        return Script(text="they agree on five", token_delay=0.01)
    return Script(text=words(5, "5" if index % 2 == 0 else "4"), token_delay=0.01)


@pytest.mark.anyio
async def test_pdr_rounds_tokens_and_paper_budgets_are_exact() -> None:
    backend = ScriptedBackend(_responder)
    result, _ = await run(PDR(parallelism=(2, 1), operator="shared_topk", k=1), backend)
    traces = samples(result)
    assert [t.label for t in traces] == ["round0", "round0", "round1"]
    assert [t.completion_tokens for t in traces] == [5, 5, 3]
    assert result.usage.total_tokens == 13 and result.usage.sequential_tokens == 8
    final = traces[-1]
    assert set(final.parents) == {traces[0].id, traces[1].id}
    b_seq = max(t.prompt_tokens + 5 for t in traces[:2]) + final.prompt_tokens + 3
    b_tot = sum(t.prompt_tokens + t.completion_tokens for t in traces)
    assert (result.metrics["seq_budget"], result.metrics["total_budget"]) == (b_seq, b_tot)
    assert result.answer == "5"
    refine = backend.streams[-1].request.messages[-1].content  # type: ignore[index]
    assert "Attempt 1:" in refine and "Attempt 2:" not in refine  # k=1 workspace


@pytest.mark.anyio
async def test_pdr_global_summary_is_a_distill_call_on_the_path() -> None:
    result, _ = await run(PDR(parallelism=(2, 1), operator="global_summary"), ScriptedBackend(_responder))
    labels = [t.label for t in samples(result)]
    assert labels == ["round0", "round0", "distill", "round1"]
    assert result.usage.sequential_tokens == 5 + 4 + 3


@pytest.mark.anyio
async def test_sr_is_a_chain_of_single_refinements() -> None:
    backend = ScriptedBackend(_responder)
    result, _ = await run(SR(), backend)
    assert [t.label for t in samples(result)] == ["round0", "round1", "round2"]
    assert result.usage.sequential_tokens == 5 + 3 + 3
    assert all(s.request.n == 1 for s in backend.streams)


@pytest.mark.anyio
async def test_pdr_drafts_can_come_from_ffs_through_the_registry() -> None:
    if "ffs" not in registry.names(registry.STRATEGY_GROUP):
        registry.register(registry.STRATEGY_GROUP, "ffs", FFS)
    strategy = PDR(
        parallelism=(2, 1), operator="shared_topk", k=1, draft_strategy="ffs", draft_options={"n": 2}
    )
    result, _ = await run(strategy, ScriptedBackend(_responder))
    traces = samples(result)
    assert len(traces) == 6  # 2 drafts x FFS(n=2), then the final round's FFS(n=2)
    assert {t.label.rsplit("/", 1)[0] for t in traces} == {"round0/draft0", "round0/draft1", "round1/draft0"}
    assert result.answer == "5" and result.metrics["seq_budget"] > 0
    assert any(t.status == "cancelled" and t.cancel_reason == "first-finish" for t in traces) or all(
        t.status == "ok" for t in traces
    )


@pytest.mark.anyio
async def test_pdr_drafts_can_come_from_deepprune() -> None:
    if "deepprune" not in registry.names(registry.STRATEGY_GROUP):
        registry.register(registry.STRATEGY_GROUP, "deepprune", DeepPrune)
    options = {"n": 2, "judge": "lexical", "truncation": "words", "prefix_k": 2}
    strategy = SR(parallelism=(1, 1), draft_strategy="deepprune", draft_options=options)
    result, _ = await run(strategy, ScriptedBackend(_responder))
    labels = [t.label for t in result.traces]
    assert labels.count("round0/draft0/sample") == 2 and labels.count("round1/draft0/sample") == 2
    assert any(label.startswith("round0/draft0/judge:lexical") for label in labels)
    assert result.answer == "5"
