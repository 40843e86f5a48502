"""Budget forcing, NoThinking and DeepConf: pure confidence maths and scripted runs."""

from __future__ import annotations

import math

import pytest
from strategy_helpers import SYNC, RewritingBackend, run, samples, words

from paragen._live import LiveSample
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.types import Delta, GenerateRequest, Trace
from strategies.budget_forcing import BudgetForcing
from strategies.deepconf import (
    DeepConf,
    DeepConfOnline,
    confidence_monitor,
    group_confidences,
    keep_top,
    leader_share,
    percentile,
    token_confidences,
    trace_score,
)
from strategies.nothinking import PREFILL, NoThinking


def test_token_and_group_confidences() -> None:
    assert token_confidences(None, [[-1.0, -3.0], [-0.5, -0.5]]) == [2.0, 0.5]
    assert token_confidences([0.0, math.log(0.5)], None) == [1.0, pytest.approx(0.5)]
    assert group_confidences([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert group_confidences([1, 3], 8) == [2.0]
    assert trace_score([4, 4, 1, 1, 4], 2, "lowest_group") == 1.0
    assert trace_score([4, 4, 1, 1, 4], 2, "tail") == 2.5


def test_keep_top_percentile_and_leader_share() -> None:
    assert keep_top([0.1, 0.9, 0.5, 0.7], 50) == [1, 3]
    assert keep_top([0.1, 0.9], 10) == [1]  # at least one
    assert percentile([1, 2, 3, 4, 5], 50) == 3 and percentile([0, 10], 90) == 9
    assert leader_share(["4", "4.0", "5", None], [1, 1, 2, 5]) == pytest.approx(0.5)
    assert leader_share([None], [1]) == 0.0


def test_confidence_monitor_prunes_after_a_full_low_window() -> None:
    live = LiveSample(Trace(id=0))
    check = confidence_monitor(threshold=0.5, window=2)
    verdicts = []
    for lp in (-2.0, -0.1, -0.1, -2.0, -2.0):
        live.add(Delta(index=0, text=" w", num_tokens=1, logprobs=(lp,)), 0.0)
        verdicts.append(check(live))
    # window not full yet; (-2, -0.1) averages above 0.5; then sure; then mixed; then the low window
    assert verdicts == [None, None, None, None, "deepconf: low confidence"]


@pytest.mark.anyio
async def test_deepconf_offline_keeps_the_most_confident() -> None:
    result, backend = await run(DeepConf(n=4, eta=50, window=4), [Script(text=words(6, "5"))] * 4)
    # four equal scores all reach the 50th percentile, and the reference keeps every one at it
    assert result.answer == "5" and result.metrics["kept"] == 4
    assert all(s.request.params.logprobs for s in backend.streams)
    assert all("confidence" in t.meta for t in samples(result))


@pytest.mark.anyio
async def test_deepconf_needs_logprobs() -> None:
    with pytest.raises(ConfigError):
        await run(DeepConf(n=2), [Script(text="x")], caps=Capabilities())


@pytest.mark.anyio
async def test_deepconf_online_stops_at_consensus() -> None:
    scripts = [Script(text=words(6, "5"), token_delay=0.005)]
    result, _ = await run(
        DeepConfOnline(n=64, n_init=4, batch=8, window=4, consensus=0.9), scripts, caps=SYNC
    )
    assert result.answer == "5"
    assert result.metrics["launched"] == 4  # the warm-up already agreed: nothing more launched
    assert len(samples(result)) == 4


def _sureness(delta: Delta) -> None:
    """The delta's logprobs say how sure its word is: "unsure" words get log p = -3."""
    delta.logprobs = (-3.0 if "unsure" in delta.text else -0.01,)


@pytest.mark.anyio
async def test_deepconf_online_prunes_low_confidence_traces() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        word = "sure" if backend.calls <= 4 else "unsure"  # the warm-up is sure, later traces are not
        return Script(text=" ".join([word] * 12) + f" \\boxed{{{index % 2}}}", token_delay=0.002)

    backend = RewritingBackend(responder, _sureness, capabilities=SYNC)
    strategy = DeepConfOnline(n=12, n_init=4, batch=8, window=3, eta=90, consensus=0.99)
    result, _ = await run(strategy, backend)
    online = [t for t in samples(result) if t.label == "online"]
    assert len(online) == 8 and all(t.status == "pruned" for t in online)
    assert {t.cancel_reason for t in online} == {"deepconf: low confidence"}
    assert all(t.completion_tokens == 3 for t in online)  # stopped as soon as the first window filled


@pytest.mark.anyio
async def test_nothinking_prefills_a_closed_thinking_block() -> None:
    result, backend = await run(NoThinking(n=3), [Script(text="\\boxed{5}")], caps=SYNC)
    request = backend.streams[0].request
    assert request.continue_final and request.messages and request.messages[-1].content == PREFILL
    assert request.n == 3 and result.answer == "5" and result.metrics["prefilled"] == 1.0


@pytest.mark.anyio
async def test_nothinking_falls_back_without_continue_final() -> None:
    result, backend = await run(NoThinking(n=2), [Script(text="\\boxed{5}")], caps=Capabilities())
    assert not backend.streams[0].request.continue_final and result.metrics["prefilled"] == 0.0


@pytest.mark.anyio
async def test_budget_forcing_cap_forces_an_answer_when_the_budget_runs_out() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        last = request.messages[-1].content if request.messages else ""
        return Script(text="7} done") if last.endswith("\\boxed{") else Script(text=words(50))

    result, _ = await run(BudgetForcing(think_tokens=10), ScriptedBackend(responder))
    traces = samples(result)
    assert [t.label for t in traces] == ["think", "answer"]
    assert traces[0].completion_tokens == 10 and traces[0].finish_reason == "length"
    assert result.answer == "7" and result.metrics["forced"] == 1.0
    assert traces[1].parents == [traces[0].id] and result.usage.sequential_tokens == 12


@pytest.mark.anyio
async def test_budget_forcing_extend_replaces_the_end_of_thinking_with_wait() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        last = request.messages[-1].content if request.messages else ""
        if last.endswith("\\boxed{"):
            return Script(text="9}")
        return Script(text="think more </think> the answer is \\boxed{3}")

    result, backend = await run(BudgetForcing(mode="extend", waits=2), ScriptedBackend(responder))
    labels = [t.label for t in samples(result)]
    assert labels == ["think", "think", "think", "answer"]  # two Waits, then the answer is forced
    prefills = [s.request.messages[-1].content for s in backend.streams[1:-1] if s.request.messages]
    assert all(p.rstrip().endswith("Wait") for p in prefills)
    assert result.metrics["waits"] == 2.0 and result.answer == "9"


@pytest.mark.anyio
async def test_budget_forcing_refuses_chat_only_backends() -> None:
    with pytest.raises(ConfigError):
        await run(BudgetForcing(), [Script(text="x")], caps=Capabilities())
