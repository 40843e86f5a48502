"""The vllm-server scorer against real `vllm serve --runner pooling` of the tiny PRM and ORM.

Scores must equal transformers' (tiny_models.py) in fp32: measured within 1.1e-6 here, tested
at 1e-4. The servers' own /metrics witness cancellation (vLLM counts aborted requests).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from tiny_models import STEP_TAG, chat_text, hf_orm_reward, hf_prm_step_scores, token_count
from vllm_servers import MAX_NUM_SEQS, SERVED, start_reward_server, step_tag_id

from paragen.scoring import ScoreRequest, ScorerError, Scorers, prm_messages
from paragen.scoring.base import orm_messages
from paragen.scoring.vllm_server import VLLMServerScorer


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only for now: these tests share one `vllm serve` per module and read its metrics, and
    # their trio runs have not been checked against that shared server yet.
    return "asyncio"


pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio]

TOLERANCE = 1e-4  # fp32 on both sides; the largest difference seen was 1.1e-6
CASES = [
    ScoreRequest(
        question="What is 2 + 3?", steps=("2 + 3 means adding.", "So it is 5.", "The answer is \\boxed{5}.")
    ),
    ScoreRequest(question="Solve x^2 = 4.", steps=("x = 2 or x = -2",)),
    ScoreRequest(question="Count " * 40, steps=tuple(f"step {i}: " + "and so on " * 12 for i in range(8))),
]


@pytest.fixture(scope="session")
def prm_server(tmp_path_factory: pytest.TempPathFactory, tiny_prm: Path) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("vllm-prm") / "server.log"
    server = start_reward_server(tiny_prm, log, step_tag_id=step_tag_id(tiny_prm, STEP_TAG))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def orm_server(tmp_path_factory: pytest.TempPathFactory, tiny_orm: Path) -> Iterator[Any]:
    server = start_reward_server(tiny_orm, tmp_path_factory.mktemp("vllm-orm") / "server.log")
    yield server
    server.stop()


async def opened(url: str, **options: Any) -> VLLMServerScorer:
    scorer = VLLMServerScorer(url, **options)
    await scorer.open()
    return scorer


@pytest.mark.parametrize("case", CASES, ids=["three-steps", "one-step", "long"])
async def test_prm_scores_equal_transformers(prm_server: Any, tiny_prm: Path, case: ScoreRequest) -> None:
    scorer = await opened(prm_server.url)
    scores = await scorer.score(case)
    await scorer.aclose()
    text = chat_text(tiny_prm, prm_messages(case.question, case.steps))
    assert scores.steps == pytest.approx(hf_prm_step_scores(tiny_prm, text), abs=TOLERANCE)
    assert scores.prompt_tokens == token_count(tiny_prm, text) and scores.count_source == "server"


async def test_the_pool_opens_the_spec_and_finds_the_only_model(prm_server: Any) -> None:
    pool = Scorers()
    scorer = await pool.get(f"vllm-server:{prm_server.root}")  # without /v1 too
    assert isinstance(scorer, VLLMServerScorer) and scorer.model == SERVED and scorer.kind == "prm"
    await pool.aclose()


async def test_orm_reward_equals_transformers(orm_server: Any, tiny_orm: Path) -> None:
    scorer = await opened(orm_server.url, kind="orm")
    case = CASES[0]
    scores = await scorer.score(case)
    await scorer.aclose()
    text = chat_text(tiny_orm, orm_messages(case.question, case.steps))
    assert scores.steps == pytest.approx([hf_orm_reward(tiny_orm, text)], abs=TOLERANCE)
    assert scores.prompt_tokens == token_count(tiny_orm, text) and scores.count_source == "server"


async def one_line_error(url: str, match: str, **options: Any) -> None:
    scorer = VLLMServerScorer(url, **options)
    with pytest.raises(ScorerError, match=match) as caught:
        await scorer.open()
    await scorer.aclose()
    assert "\n" not in caught.value.one_line()


async def test_wrong_urls_fail_at_open_with_one_line(prm_server: Any) -> None:
    await one_line_error("http://127.0.0.1:9/v1", r"cannot reach vLLM at http://127\.0\.0\.1:9/v1/models")
    await one_line_error(f"{prm_server.root}/nowhere/v1", r"is not a vLLM server \(GET /v1/models: 404\)")
    await one_line_error(prm_server.url, r"does not serve 'other'.*it serves \['tiny-rm'\]", model="other")


async def test_the_wrong_kind_of_model_fails_at_open(prm_server: Any, orm_server: Any) -> None:
    await one_line_error(orm_server.url, r"one value for the whole chat, not one per step")
    await one_line_error(prm_server.url, r"0 values where an outcome reward model gives one", kind="orm")


async def test_a_step_tag_the_server_does_not_pool_at_names_its_id(prm_server: Any) -> None:
    # "<|im_start|>" is token 1 of SmolLM2's vocabulary; the server pools at <extra_0> only
    await one_line_error(
        prm_server.url, r"0 step scores for 1 step.*step_tag_id\": 1\}", step_tag="<|im_start|>"
    )


async def test_cancelling_closes_the_requests_and_vllm_drops_them(prm_server: Any, tiny_prm: Path) -> None:
    """48 requests at once, cancelled while vLLM holds some in its queue: the queued ones are never
    computed. At the cancel, up to two batches (--max-num-seqs 8 each) may be computed unread: one
    finished whose replies are still on their way, and the one running (a forward pass is not
    interrupted). Once seen: 6 scored, 16 computed."""
    scorer = await opened(prm_server.url)
    case = CASES[2]
    per_request = token_count(tiny_prm, chat_text(tiny_prm, prm_messages(case.question, case.steps)))
    before = await anyio.to_thread.run_sync(prm_server.wait_idle)
    scored = 0

    async def one() -> None:
        nonlocal scored
        await scorer.score(case)
        scored += 1

    async with anyio.create_task_group() as tg:
        for _ in range(48):
            tg.start_soon(one)
        await wait_until_queued(prm_server)
        tg.cancel_scope.cancel()
    after = await anyio.to_thread.run_sync(prm_server.wait_idle)
    await scorer.aclose()
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert scored < 48, "everything was scored before the cancel: the test proves nothing"
    computed = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    assert computed % per_request == 0
    computed_requests = int(computed // per_request)
    unread = computed_requests - scored
    assert 0 <= unread <= 2 * MAX_NUM_SEQS, f"{computed_requests} computed, {scored} scored"
    assert computed_requests < 48, "vLLM computed every request: the cancel did not reach its queue"


async def wait_until_queued(server: Any) -> None:
    """Until vLLM has requests waiting behind those it runs (its own gauge says so)."""
    with anyio.fail_after(60):
        while (await anyio.to_thread.run_sync(server.metrics)).get("vllm:num_requests_waiting", 0) == 0:
            pass
