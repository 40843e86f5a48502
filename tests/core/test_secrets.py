"""An API key never appears in any output: records, run.json, reports, logs, stdout or stderr.

The server is real (loopback HTTP) and hostile: every error it answers (400, 401, 429, 500, 503,
and an error event inside a 200 stream) echoes the request's Authorization header back. The key
is given each documented way: --backend-opt api_key, the OPENAI_API_KEY variable, inside the URL
(user:KEY@host), and through the Python API (api_key= and inside the URL).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from echo_server import FAILURES, EchoServer, echo_server

from paragen import StrategyResult, asolve
from paragen.backends.openai import OpenAIBackend
from paragen.config import split_credentials
from paragen.errors import BackendError

KEY = "sk-test-Z9secret0key1234"
Q = "What is 7 + 5?"


@pytest.fixture(scope="module")
def server() -> Iterator[EchoServer]:
    with echo_server() as running:
        yield running


def paragen(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "paragen.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**environment, "COLUMNS": "200", **env},
        timeout=180,
    )


def solve_and_close(backend: OpenAIBackend, strategy: str, **options: Any) -> StrategyResult:
    async def go() -> StrategyResult:
        try:
            return await asolve(Q, strategy=strategy, backend=backend, **options)
        finally:
            await backend.aclose()

    return anyio.run(go)


def _ways(server: EchoServer) -> dict[str, tuple[str, list[str], dict[str, str]]]:
    """Way of giving the key -> (backend spec, extra flags, environment)."""
    url = f"{server.root}/cycle/v1"
    user_url = url.replace("http://", f"http://someone:{KEY}@")
    return {
        "backend-opt": (f"openai:{url}", ["--backend-opt", f"api_key={KEY}"], {}),
        "env": (f"openai:{url}", [], {"OPENAI_API_KEY": KEY}),
        "url": (f"openai:{user_url}", [], {}),
    }


@pytest.mark.parametrize("way", ["backend-opt", "env", "url"])
def test_cli_never_shows_the_key(way: str, server: EchoServer, tmp_path: Path) -> None:
    spec, flags, env = _ways(server)[way]
    common = ["-b", spec, "-m", "m", *flags, "--backend-opt", "max_retries=0"]
    seen = len(server.seen_auth)
    run = paragen(["run", Q, "-s", "majority", "-n", str(len(FAILURES)), *common], tmp_path, **env)
    # Every sample failed: one line naming the server's complaint, redacted.
    assert run.returncode == 2 and "every sample failed" in run.stderr, run.stderr
    out = tmp_path / "run"
    sweep = ["eval", "-t", "arith", "--limit", str(len(FAILURES)), "-s", "single", *common]
    evaluated = paragen([*sweep, "--out", str(out), "--no-progress", "--no-plot"], tmp_path, **env)
    # Every completion is refused, so no problem got a result: exit 1, the records say why.
    assert evaluated.returncode == 1 and "no problem got a result" in evaluated.stderr, evaluated.stderr
    report = paragen(["report", str(out), "-f", "json"], tmp_path)
    records = (out / "records.jsonl").read_text()
    written = {
        "records.jsonl": records,
        "run.json": (out / "run.json").read_text(),
        **{
            f"{name} {stream}": getattr(done, stream)
            for name, done in [("run", run), ("eval", evaluated), ("report", report)]
            for stream in ("stdout", "stderr")
        },
    }
    for where, text in written.items():
        assert KEY not in text, f"the key is in {where}"
    # Not vacuous: the key reached the server, every failure kind was met, and the server's
    # echo did land in the records, with the key cut out of it.
    assert all(KEY in auth for auth in server.seen_auth[seen:])
    errors = [t["error"] for r in map(json.loads, records.splitlines()) for t in r["result"]["traces"]]
    assert sum("you sent Authorization: ***" in (e or "") for e in errors) >= len(FAILURES) - 1
    assert any("HTTP 503" in (e or "") for e in errors) and any("in stream" in (e or "") for e in errors)
    assert "someone" not in written["run.json"] and f"{server.root}/cycle/v1" in written["run.json"]


@pytest.mark.parametrize("way", ["api_key", "url"])
def test_python_api_never_shows_the_key(
    way: str, server: EchoServer, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{server.root}/cycle/v1"
    if way == "api_key":
        backend = OpenAIBackend.from_spec(url, model="m", api_key=KEY, max_retries=0)
    else:
        backend = OpenAIBackend.from_spec(
            url.replace("http://", f"http://u:{KEY}@"), model="m", max_retries=0
        )
    seen = len(server.seen_auth)
    with caplog.at_level(logging.DEBUG):
        result = solve_and_close(backend, "majority", n=len(FAILURES))
    captured = capsys.readouterr()
    for where, text in {
        "result": result.model_dump_json(),
        "logs": caplog.text,
        "stdout": captured.out,
        "stderr": captured.err,
        "repr": repr(backend),
        "config": backend.config.model_dump_json(),
    }.items():
        assert KEY not in text, f"the key is in {where}"
    assert all(KEY in auth for auth in server.seen_auth[seen:])
    assert {t.status for t in result.traces} == {"error"}
    assert any("you sent Authorization: ***" in (t.error or "") for t in result.traces)
    assert backend.config.base_url == url


def test_probe_errors_are_redacted_too(server: EchoServer) -> None:
    """A failing probe (GET /v1/models) goes through the same redaction as completions."""
    backend = OpenAIBackend.from_spec(f"{server.root}/failprobe/v1", api_key=KEY, max_retries=0)
    # The backend is opened (probed) before the first problem, so the probe's error is the run's.
    with pytest.raises(BackendError) as failed:
        solve_and_close(backend, "single")
    text = failed.value.one_line()
    assert KEY not in text and "probe refused: you sent Authorization: ***" in text


def test_url_credentials_become_the_key() -> None:
    assert split_credentials("http://user:p%40ss@host:8000/v1") == ("http://host:8000/v1", "p@ss")
    assert split_credentials("http://TOKEN@host/v1") == ("http://host/v1", "TOKEN")
    assert split_credentials("http://host/v1") == ("http://host/v1", None)
    assert split_credentials("model.gguf") == ("model.gguf", None)


def test_a_bad_spec_does_not_echo_url_credentials(tmp_path: Path) -> None:
    done = paragen(["run", Q, "-b", f"1x:http://u:{KEY}@127.0.0.1:9/v1"], tmp_path)
    assert done.returncode == 2 and "bad backend spec" in done.stderr and KEY not in done.stderr


def test_eval_api_records_the_spec_without_credentials(tmp_path: Path) -> None:
    from evals.run.spec import BackendSetup, EvalSpec, RunFolder
    from evals.tasks import Selection, get_task, load_task

    url = f"openai:http://u:{KEY}@h/v1"
    loaded = load_task(get_task("arith"), Selection(limit=1), source="bundled")
    spec = EvalSpec(
        task=get_task("arith"), problems=[], data=loaded.source, combos=[],
        backend=BackendSetup(url), folder=RunFolder(tmp_path),
    )  # fmt: skip
    assert spec.backend.spec == "openai:http://h/v1"
