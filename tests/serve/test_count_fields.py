"""STRATEGY-N over HTTP: N sets the strategy's own count field (Hogwild!'s workers), and the
per-request sample limit counts what the strategy runs at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import Serve

from paragen.backends.engine import EngineBackend
from paragen.backends.scripted import ScriptedBackend

Q = [{"role": "user", "content": "What is 7 + 5?"}]


@pytest.fixture
def engine(tiny_engine_dir: Path) -> Iterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(tiny_engine_dir), dtype="float32", num_blocks=256, block_size=16)
    yield backend


@pytest.mark.slow
def test_hogwild_n_runs_n_workers(serve: Serve, engine: EngineBackend) -> None:
    with serve(engine, names=("tiny",), close_backend=True) as url:
        body = {
            "model": "hogwild-2/tiny",
            "messages": Q,
            "max_tokens": 6,
            "paragen": {"include_result": True},
        }
        response = httpx.post(url + "/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result = response.json()["choices"][0]["paragen"]["result"]
    assert result["config"]["workers"] == 2


def test_the_sample_limit_counts_what_runs_at_once(serve: Serve, scripted: ScriptedBackend) -> None:
    config = {"parallelism": [3, 1], "draft_strategy": "majority", "draft_options": {"n": 5}}
    with serve(scripted, max_samples_per_request=14) as url:
        body = {"model": "pdr/scripted", "messages": Q, "paragen": {"config": config}}
        response = httpx.post(url + "/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert "asks for 15 samples" in response.json()["error"]["message"]
    with serve(scripted, max_samples_per_request=2) as url:
        body = {"model": "hogwild_text-3/scripted", "messages": Q}
        workers = httpx.post(url + "/chat/completions", json=body)
    assert workers.status_code == 400 and "asks for 3 samples" in workers.json()["error"]["message"]
    assert scripted.calls == 0


def test_pdr_n_runs_a_first_round_of_n_drafts(serve: Serve, scripted: ScriptedBackend) -> None:
    with serve(scripted) as url:
        body = {"model": "pdr-4/scripted", "messages": Q, "paragen": {"include_result": True}}
        response = httpx.post(url + "/chat/completions", json=body)
    assert response.status_code == 200, response.text
    result = response.json()["choices"][0]["paragen"]["result"]
    assert result["config"]["width"] == 4 and result["config"]["parallelism"] == [4, 2, 1]
    first_round = [t for t in result["traces"] if t["label"].startswith("round0")]
    assert len(first_round) == 4
