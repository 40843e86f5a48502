"""Preflight: what cannot run is refused before anything is generated or written (exit 2, every
line at once); run.json and records name the model that answered."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from paragen.backends.base import Capacity
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import BackendProtocolError
from paragen.preflight import preflight
from paragen.strategy import build_strategy
from paragen.types import Problem, SamplingParams

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backends"))

real_servers: Any = importlib.import_module("real_servers")


def paragen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from paragen.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def test_run_deepconf_on_the_engine_is_refused_naming_slots_and_blocks() -> None:
    done = paragen("run", "What is 1+1?", "-s", "deepconf")
    assert done.returncode == 2, done.stderr
    assert "deepconf" in done.stderr and "slots" in done.stderr and "blocks" in done.stderr
    assert "256 slots" in done.stderr


def test_eval_on_llama_cpp_python_refuses_every_strategy_at_once(tmp_path: Path) -> None:
    server = real_servers.start_llama(tmp_path / "llama.log")
    try:
        out = tmp_path / "run"
        strategies = "majority,dynasor,budget_forcing"
        args = [
            "eval",
            "-t",
            "arith",
            "--limit",
            "2",
            "-s",
            strategies,
            "-n",
            "2",
            "-b",
            f"openai:{server.url}",
        ]
        done = paragen(*args, "--max-tokens", "4000", "--out", str(out))
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if "cannot run" in line]
        assert any("dynasor n=2" in line for line in lines), done.stderr
        assert any("budget_forcing n=1" in line for line in lines), done.stderr
        assert not any("majority" in line for line in lines)
        assert not (out / "records.jsonl").exists()
        # What can run does, and names the model the server answered with: its listed id and owner.
        ran = tmp_path / "ran"
        done = paragen(*args[:6], "majority", "-n", "1", *args[-2:], "--max-tokens", "4", "--out", str(ran))
        assert done.returncode == 0, done.stderr
        model = json.loads((ran / "run.json").read_text())["model"]
        assert model["server"] == "llama_cpp" and model["listed"]["id"] == model["name"], model
        records = [json.loads(line) for line in (ran / "records.jsonl").read_text().splitlines()]
        assert {r["model"] for r in records} == {model["name"]}
        # majority can run, cut at the server's context: a warning, not a refusal (2048 n_ctx is
        # not listed by llama-cpp-python, so there is none to see here unless it says so)
    finally:
        server.stop()


@pytest.mark.timeout(600)
def test_preset_run_on_another_model_says_so(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "--preset", "r1-distill-qwen-1.5b-math500", "--limit", "1", "-n", "1"]
    done = paragen(*args, "--max-tokens", "8", "--no-progress", "--no-plot", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "the preset is of deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" in done.stderr
    info = json.loads((out / "run.json").read_text())
    assert info["model_matches_preset"] is False
    assert info["preset_model"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert "SmolLM2" in info["model"]["name"] and len(info["model"]["sha256"]) == 64
    record = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert "SmolLM2" in record["model"]
    # The report names the model too, and no published figure is judged on another model.
    shown = paragen("report", str(out), "--format", "md")
    assert shown.returncode == 0, shown.stderr
    assert "not the preset's" in shown.stdout and "n/a: ran on" in shown.stdout
    assert "published figures are not reproduced here" in shown.stderr  # the report's notes


class _BrokenTokenizer(ScriptedBackend):
    """A server whose tokenize endpoint answers something that is not a count (a gateway's page)."""

    async def count_tokens(self, text: str) -> tuple[int, str]:
        raise BackendProtocolError("http://gateway/tokenize: answer is not JSON")

    def capacity(self) -> Capacity:
        return Capacity(what="the server", sequence_tokens=40, hard_context=True)


def test_a_broken_tokenize_endpoint_falls_back_to_an_estimate() -> None:
    """The prompt's size is still checked (on an estimate), and the sweep is not refused for it."""
    problem = Problem(question="What is 1+1?")
    sampling = SamplingParams(max_tokens=16)

    async def check(max_tokens: int) -> Any:
        backend = _BrokenTokenizer([Script(text="\\boxed{2}")])
        strategies = [("majority", build_strategy("majority", {"n": 2}))]
        budget = sampling.model_copy(update={"max_tokens": max_tokens})
        return await preflight(backend, strategies, problem, sampling=budget)

    assert anyio.run(check, 16).errors == []
    refused = anyio.run(check, 64).errors
    assert len(refused) == 1 and "majority" in refused[0], refused
