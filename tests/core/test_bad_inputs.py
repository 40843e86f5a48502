"""Table-driven: bad inputs to the CLI and the API each give one clear line, exit code 2, write nothing."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from paragen import (
    Budget,
    ConfigError,
    GenerateRequest,
    Orchestrator,
    Problem,
    SamplingParams,
    build_strategy,
)
from paragen.backends.scripted import ScriptedBackend
from paragen.cli import main
from paragen.config import parse_backend_spec
from paragen.errors import PluginNotFoundError
from strategies.majority import Majority

Q = "What is 7 + 5?"
SCRIPTED = ["-b", "scripted"]

CLI_CASES: list[tuple[str, list[str], str]] = [
    ("unknown strategy", ["run", Q, "-s", "nope", *SCRIPTED], "unknown strategy 'nope'"),
    ("unknown backend", ["run", Q, "-b", "nope"], "unknown backend 'nope'"),
    ("empty backend spec", ["run", Q, "-b", ""], "empty backend spec"),
    ("malformed backend spec", ["run", Q, "-b", "1x:foo"], "bad backend spec"),
    ("n zero", ["run", Q, "-n", "0", *SCRIPTED], "n: Input should be greater than or equal to 1"),
    ("n negative", ["run", Q, "-n", "-3", *SCRIPTED], "n: Input should be greater than or equal to 1"),
    ("n above cap", ["run", Q, "-n", "100000", *SCRIPTED], "n: Input should be less than or equal to 1024"),
    ("n not a number", ["run", Q, "-n", "abc", *SCRIPTED], "'-n'"),
    ("unknown flag", ["run", Q, "--bogus"], "No such option: --bogus"),
    ("missing question", ["run"], "Missing argument"),
    ("empty question", ["run", "", *SCRIPTED], "the question is empty"),
    ("blank question", ["run", "   ", *SCRIPTED], "the question is empty"),
    ("non-UTF-8 question", ["run", "caf\udce9", *SCRIPTED], "not valid UTF-8"),
    ("option without =", ["run", Q, "--opt", "foo", *SCRIPTED], "write KEY=VALUE"),
    (
        "unknown strategy field",
        ["run", Q, "--opt", "bogus=1", *SCRIPTED],
        "bogus: Extra inputs are not permitted",
    ),
    (
        "strategy field wrong type",
        ["run", Q, "--opt", "n=abc", *SCRIPTED],
        "n: Input should be a valid integer",
    ),
    ("negative temperature", ["run", Q, "--temperature", "-1", *SCRIPTED], "temperature"),
    ("temperature not a number", ["run", Q, "--temperature", "hot", *SCRIPTED], "--temperature"),
    ("max tokens zero", ["run", Q, "--max-tokens", "0", *SCRIPTED], "max-tokens"),
    ("max tokens negative", ["run", Q, "--max-tokens", "-5", *SCRIPTED], "max-tokens"),
    ("token budget zero", ["run", Q, "--max-total-tokens", "0", *SCRIPTED], "max-total-tokens"),
    ("token budget negative", ["run", Q, "--max-total-tokens", "-10", *SCRIPTED], "max-total-tokens"),
    ("deadline negative", ["run", Q, "--deadline", "-1", *SCRIPTED], "deadline-s"),
    ("deadline zero", ["run", Q, "--deadline", "0", *SCRIPTED], "deadline-s"),
    (
        "base url on engine",
        ["run", Q, "-b", "engine", "--base-url", "http://x"],
        "--base-url is for the openai",
    ),
    ("missing script file", ["run", Q, "-b", "scripted:/nonexistent.jsonl"], "no script file"),
    ("scripted options", ["run", Q, *SCRIPTED, "--backend-opt", "x=1"], "takes no options"),
    ("backend option without =", ["run", Q, *SCRIPTED, "--backend-opt", "x"], "bad --backend-opt"),
    (
        "unknown scorer",
        ["run", Q, "-s", "best_of_n", "--opt", "scorer=nope", *SCRIPTED],
        "unknown scorer 'nope'",
    ),
    (
        "threshold out of range",
        ["run", Q, "-s", "adaptive_consistency", "--opt", "threshold=2", *SCRIPTED],
        "threshold",
    ),
    ("single with n=2", ["run", Q, "-s", "single", "-n", "2", *SCRIPTED], "n: Input should be less than"),
    ("unknown command", ["nonexistent"], "No such command"),
    ("seed not a number", ["run", Q, "--seed", "x", *SCRIPTED], "--seed"),
    (
        "unreachable server",
        ["run", Q, "-b", "openai:http://127.0.0.1:9/v1", "--model", "m", "-n", "2"],
        "127.0.0.1:9",
    ),
]


@pytest.mark.parametrize(("case", "argv", "expected"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input(case: str, argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2, f"{case}: exit {exit_info.value.code}, stderr {err!r}"
    assert len(err.splitlines()) == 1, f"{case}: not one line: {err!r}"
    assert expected in err, f"{case}: {err!r}"


class _RefuseKey(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._refuse()

    def do_POST(self) -> None:
        self._refuse()

    def _refuse(self) -> None:
        body = b'{"error": {"message": "invalid api key", "type": "invalid_request_error"}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def refusing_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefuseKey)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_cli_wrong_api_key(refusing_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "run",
        Q,
        "-b",
        f"openai:{refusing_server}",
        "--model",
        "m",
        "--backend-opt",
        "api_key=sk-secret-123",
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2
    assert len(err.splitlines()) == 1
    assert "API key" in err or "api key" in err.lower()
    assert "sk-secret-123" not in err


def test_cli_out_into_missing_folder_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing" / "result.json"
    with pytest.raises(SystemExit) as exit_info:
        main(["run", Q, *SCRIPTED, "--out", str(target)])
    assert exit_info.value.code == 2
    assert "folder does not exist" in capsys.readouterr().err
    assert not target.parent.exists()


def test_cli_good_run_writes_the_whole_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "result.json"
    main(["run", Q, *SCRIPTED, "-n", "4", "--out", str(target)])
    assert "answer" in capsys.readouterr().out
    assert '"strategy": "majority"' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left behind


API_CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("empty question", lambda: Problem(question=""), ValidationError, "question"),
    ("negative temperature", lambda: SamplingParams(temperature=-1), ValidationError, "temperature"),
    ("top_p zero", lambda: SamplingParams(top_p=0), ValidationError, "top_p"),
    (
        "empty stop string",
        lambda: SamplingParams(stop=("",)),
        ValidationError,
        "stop strings must be non-empty",
    ),
    ("max_tokens zero", lambda: SamplingParams(max_tokens=0), ValidationError, "max_tokens"),
    ("unknown sampling field", lambda: SamplingParams(temprature=0.5), ValidationError, "temprature"),
    (
        "no prompt nor messages",
        lambda: GenerateRequest(),
        ValidationError,
        "exactly one of prompt or messages",
    ),
    (
        "prompt and messages",
        lambda: GenerateRequest(prompt="a", messages=[{"role": "user", "content": "b"}]),
        ValidationError,
        "exactly one of prompt or messages",
    ),
    ("n zero request", lambda: GenerateRequest(prompt="a", n=0), ValidationError, "n"),
    (
        "continue without assistant",
        lambda: GenerateRequest(messages=[{"role": "user", "content": "b"}], continue_final=True),
        ValidationError,
        "continue_final",
    ),
    (
        "bad role",
        lambda: GenerateRequest(messages=[{"role": "robot", "content": "b"}]),
        ValidationError,
        "role",
    ),
    ("negative budget", lambda: Budget(max_total_tokens=-1), ValidationError, "max_total_tokens"),
    ("unknown strategy", lambda: build_strategy("nope"), PluginNotFoundError, "available: "),
    ("majority n zero", lambda: build_strategy("majority", {"n": 0}), ConfigError, "n: Input should be"),
    ("majority unknown field", lambda: Majority(bogus=1), ConfigError, "bogus"),
    (
        "zero problem limit",
        lambda: Orchestrator(ScriptedBackend(), max_concurrent_problems=0),
        ValueError,
        "max_concurrent_problems",
    ),
    ("empty backend spec", lambda: parse_backend_spec(""), ConfigError, "empty backend spec"),
    ("scripted empty table", lambda: ScriptedBackend([]), ConfigError, "at least one script"),
]


@pytest.mark.parametrize(("case", "make", "error", "expected"), API_CASES, ids=[c[0] for c in API_CASES])
def test_api_bad_input(case: str, make: Callable[[], object], error: type[Exception], expected: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert expected in str(info.value), f"{case}: {info.value}"
