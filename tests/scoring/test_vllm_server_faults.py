"""Faults a vLLM server can answer with, injected with httpx.MockTransport: each is one ScorerError
line. (The scorer against a real `vllm serve`: test_vllm_server_scorer.py.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from paragen.errors import ConfigError
from paragen.scoring import ScoreRequest, ScorerError, build_scorer
from paragen.scoring.vllm_inproc import VLLMScorer
from paragen.scoring.vllm_server import VLLMServerScorer


@pytest.fixture
def anyio_backend() -> str:
    # asyncio only for now: these tests share one `vllm serve` per module and read its metrics, and
    # their trio runs have not been checked against that shared server yet.
    return "asyncio"


pytestmark = pytest.mark.anyio

URL = "http://vllm.test:8000/v1"
MODELS = {"object": "list", "data": [{"id": "prm", "object": "model"}]}
TWO_STEPS = ScoreRequest(question="q", steps=("a", "b"))
Route = Callable[[httpx.Request], httpx.Response]


def pooling_answer(data: Any, prompt_tokens: int = 7) -> dict[str, Any]:
    item = {"index": 0, "object": "pooling", "data": data}
    return {"object": "list", "model": "prm", "data": [item], "usage": {"prompt_tokens": prompt_tokens}}


def server(pooling: Route, models: dict[str, Any] = MODELS) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [49152], "count": 1})
        return pooling(request)

    return httpx.MockTransport(handle)


def answering(status: int, **content: Any) -> httpx.MockTransport:
    """A server whose /pooling answers ``status`` with ``content`` (httpx.Response's json= or text=)."""
    return server(lambda request: httpx.Response(status, **content))


async def one_line_error(transport: httpx.MockTransport, match: str, **options: Any) -> None:
    scorer = VLLMServerScorer(URL, transport=transport, **options)
    with pytest.raises(ScorerError, match=match) as caught:
        await scorer.score(TWO_STEPS)
    await scorer.aclose()
    assert "\n" not in caught.value.one_line()


async def test_the_request_shape_and_a_good_answer() -> None:
    sent: list[httpx.Request] = []

    def pooling(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=pooling_answer([[0.9, 0.1], [0.3, 0.7]]))

    scorer = VLLMServerScorer(URL, transport=server(pooling))
    scores = await scorer.score(TWO_STEPS)
    await scorer.aclose()
    assert scores.steps == (0.1, 0.7) and scores.prompt_tokens == 7 and scores.count_source == "server"
    assert sent[0].url.path == "/pooling"
    body = httpx.Response(200, content=sent[0].content).json()
    assert body["add_generation_prompt"] is False and body["messages"][2]["content"] == "a<extra_0>b<extra_0>"


async def test_http_errors() -> None:
    vllm_500 = {"error": {"message": "EngineCore encountered\nan issue", "code": 500}}
    await one_line_error(answering(500, json=vllm_500), r"answered 500: EngineCore encountered an")
    await one_line_error(answering(404, json={}), r"serves no pooling model.*--runner pooling")
    await one_line_error(answering(400, text="bad"), r"answered 400: bad")


async def test_malformed_answers() -> None:
    await one_line_error(answering(200, text="<html>"), r"not JSON: '<html>'")
    await one_line_error(answering(200, json={"data": []}), r"no single item")
    nan = pooling_answer([[0.5, "x"], [0.5, 0.5]])
    await one_line_error(answering(200, json=nan), r"returned 'x' where a score belongs")


async def test_wrong_numbers_of_scores() -> None:
    one_row = pooling_answer([[0.5, 0.5]])
    wrong_tag = (
        r"1 step scores for 2 step\(s\) .*id of '<extra_0>': --pooler-config '\{\"step_tag_id\": 49152\}'"
    )
    await one_line_error(answering(200, json=one_row), wrong_tag)
    picked = pooling_answer([[0.5], [0.5]])
    await one_line_error(answering(200, json=picked), r"rows of 1 values.*returned_token_ids")
    two_labels = pooling_answer([0.2, 0.8])
    await one_line_error(answering(200, json=two_labels), r"2 values", kind="orm")


async def test_an_orm_reads_a_classifier_or_the_last_token_of_a_token_reward_model() -> None:
    for data, reward in (([1.5], 1.5), ([[0.1], [-0.2], [2.5]], 2.5)):
        scorer = VLLMServerScorer(URL, kind="orm", transport=answering(200, json=pooling_answer(data)))
        assert (await scorer.score(TWO_STEPS)).steps == (reward,)
        await scorer.aclose()


async def test_open_needs_a_model_named_when_several_are_served() -> None:
    two = {"data": [{"id": "a"}, {"id": "b"}]}
    scorer = VLLMServerScorer(URL, transport=server(lambda r: httpx.Response(200), models=two))
    with pytest.raises(ScorerError, match=r"serves 2 models \(name one with \?model=NAME\)"):
        await scorer.open()
    await scorer.aclose()


def test_spec_options_reach_the_scorer() -> None:
    scorer = build_scorer("vllm-server:http://h:8000/v1?kind=orm&model=rm&timeout=5")
    assert isinstance(scorer, VLLMServerScorer) and scorer.kind == "orm" and scorer.model == "rm"
    assert scorer.root == "http://h:8000"
    with pytest.raises(ConfigError, match="kind must be prm or orm"):
        build_scorer("vllm-server:http://h:8000?kind=judge")


def test_importing_the_vllm_scorers_does_not_import_vllm() -> None:
    code = (
        "import sys, paragen.scoring.vllm_inproc, paragen.scoring.vllm_server; print('vllm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_the_inprocess_scorer_without_vllm_says_how_to_install_it() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    scorer = VLLMScorer("/nowhere")
    with pytest.raises(ConfigError, match=r"needs vLLM.*pip install 'paragen\[vllm\]'"):
        await scorer.open()
