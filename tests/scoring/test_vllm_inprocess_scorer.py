"""The vllm scorer: the tiny PRM and ORM on vLLM's AsyncLLM in this process (the vLLM venv:
`make unit-vllm`). Scores must equal transformers' in fp32 (tested at 1e-4; seen within 5e-7).
vLLM's Prometheus gauges in this process witness that a cancelled call leaves nothing behind.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tiny_models import chat_text, hf_orm_reward, hf_prm_step_scores, token_count

from paragen.scoring import ScoreRequest, ScorerError, prm_messages
from paragen.scoring.base import orm_messages
from paragen.scoring.vllm_inproc import VLLMScorer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.anyio,
    # vLLM and the torch modules it imports warn about their own deprecations; not ours to fix.
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

TOLERANCE = 1e-4
ENGINE: dict[str, Any] = {"dtype": "float32", "enforce_eager": True, "max_model_len": 1024, "max_num_seqs": 8}
CASES = [
    ScoreRequest(question="What is 2 + 3?", steps=("2 + 3 means adding.", "So it is 5.", "The answer is 5.")),
    ScoreRequest(question="Count " * 40, steps=tuple(f"step {i}: " + "and so on " * 12 for i in range(8))),
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one event loop for the module: the engine's output task lives on it


@pytest.fixture(scope="module")
def vllm_settings() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed here (make setup-vllm; run from .venv-vllm)")
    # vLLM's CPU settings for a shared machine, as tests/backends/real_servers.py sets them
    os.environ.update(
        {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    )


OPENING: dict[str, float] = {}  # how the PRM's open() went: its seconds, the event loop's longest gap


@pytest.fixture(scope="module")
async def prm(vllm_settings: None, tiny_prm: Path) -> AsyncIterator[VLLMScorer]:
    scorer = VLLMScorer(str(tiny_prm), **ENGINE)
    ticks = [anyio.current_time()]

    async def tick() -> None:  # what a server's other requests need: the loop turning
        while True:
            await anyio.sleep(0.02)
            ticks.append(anyio.current_time())

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await scorer.open()
        ticks.append(anyio.current_time())  # a loop held until the end shows as one long gap
        tg.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    OPENING.update(seconds=ticks[-1] - ticks[0], longest_gap=max(gaps))
    yield scorer
    await scorer.aclose()


async def test_the_event_loop_goes_on_while_the_engine_loads(prm: VLLMScorer) -> None:
    """Loading in a worker thread: a 20 ms tick is held up at most by an import holding the GIL,
    never for the whole load (as it would be if open() ran on the event loop)."""
    assert OPENING["seconds"] > 4.0, OPENING  # loading took long enough for a stall to show
    assert OPENING["longest_gap"] < 2.0, OPENING


@pytest.mark.parametrize("case", CASES, ids=["three-steps", "long"])
async def test_prm_scores_equal_transformers(prm: VLLMScorer, tiny_prm: Path, case: ScoreRequest) -> None:
    scores = await prm.score(case)
    text = chat_text(tiny_prm, prm_messages(case.question, case.steps))
    assert scores.steps == pytest.approx(hf_prm_step_scores(tiny_prm, text), abs=TOLERANCE)
    assert scores.prompt_tokens == token_count(tiny_prm, text) and scores.count_source == "token_ids"


async def test_a_step_tag_of_several_tokens_is_refused_at_open(vllm_settings: None, tiny_prm: Path) -> None:
    scorer = VLLMScorer(str(tiny_prm), step_tag="<step>", **ENGINE)
    with pytest.raises(ScorerError, match=r"step tag '<step>' is \d+ tokens in this tokenizer, not one"):
        await scorer.open()
    assert scorer.engine is None


async def test_cancelled_calls_are_aborted_in_the_engine(prm: VLLMScorer, tiny_prm: Path) -> None:
    """24 calls at once, cancelled while vLLM queues some: the queued ones are never computed
    (its prompt-token counter says so) and nothing is left running or waiting."""
    case = CASES[1]
    per_request = token_count(tiny_prm, chat_text(tiny_prm, prm_messages(case.question, case.steps)))
    before = await idle()
    scored = 0

    async def one() -> None:
        nonlocal scored
        await prm.score(case)
        scored += 1

    async with anyio.create_task_group() as tg:
        for _ in range(24):
            tg.start_soon(one)
        with anyio.fail_after(60):
            while True:  # until vLLM holds some of the calls in its queue
                if metrics().get("vllm:num_requests_waiting", 0) > 0:
                    break
                await anyio.sleep(0.005)
        tg.cancel_scope.cancel()
    after = await idle()
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    computed = (after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]) / per_request
    assert scored <= computed < 24, f"{computed} computed, {scored} scored of 24"
    assert (await prm.score(CASES[0])).steps  # the engine still serves


async def test_orm_reward_equals_transformers(vllm_settings: None, tiny_orm: Path) -> None:
    scorer = VLLMScorer(str(tiny_orm), kind="orm", **ENGINE)
    await scorer.open()
    try:
        scores = await scorer.score(CASES[0])
    finally:
        await scorer.aclose()
    text = chat_text(tiny_orm, orm_messages(CASES[0].question, CASES[0].steps))
    assert scores.steps == pytest.approx([hf_orm_reward(tiny_orm, text)], abs=TOLERANCE)
    assert scores.prompt_tokens == token_count(tiny_orm, text)


async def idle(wait_s: float = 20.0) -> dict[str, float]:
    """vLLM's gauges in this process once nothing runs or waits (or after ``wait_s``)."""
    with anyio.move_on_after(wait_s):
        while True:
            values = metrics()
            if values.get("vllm:num_requests_running", 0) + values.get("vllm:num_requests_waiting", 0) == 0:
                break
            await anyio.sleep(0.1)
    return metrics()


def metrics() -> dict[str, float]:
    from prometheus_client import REGISTRY

    values: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name.startswith("vllm:"):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values
