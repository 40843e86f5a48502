"""``paragen run`` exports its spans over OTLP/HTTP: to the endpoint of ``--otlp-endpoint``, or of the
standard OTEL_* variables, as protobuf that OpenTelemetry's own message types read back. The receiver
is a minimal one in the test (the Collector is a binary outside the package registries); the command
is the real one, in its own process, flushing its spans before it exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from otlp_receiver import Receiver

from paragen import tracing
from paragen.errors import ConfigError


def paragen_run(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    script = tmp_path / "script.jsonl"
    lines = [{"text": " ".join(["w"] * k) + " \\boxed{4}", "token_delay": 0.002} for k in (3, 30, 40)]
    script.write_text("".join(json.dumps(line) + "\n" for line in lines))
    argv = [sys.executable, "-m", "paragen.cli", "run", "2+2?", "-s", "ffs", "-n", "3", "--json"]
    argv += ["-b", f"scripted:{script}", *flags]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(argv, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_flag_sends_the_runs_tree_over_otlp_http(receiver: Receiver, tmp_path: Path) -> None:
    result = paragen_run(tmp_path, "--otlp-endpoint", receiver.url)
    assert {path for path, _ in receiver.exports} == {"/v1/traces"}
    spans = receiver.spans()
    assert sorted(s.name for s in spans) == ["run ffs", "sample", "sample", "sample"]
    assert len({s.trace_id for s in spans}) == 1 and receiver.services() == {"paragen"}
    [run] = [s for s in spans if s.name == "run ffs"]
    assert all(s.parent_span_id == run.span_id for s in spans if s is not run)
    attributes = {kv.key: kv.value for kv in run.attributes}
    assert attributes["gen_ai.usage.output_tokens"].int_value == result["usage"]["total_tokens"]
    cancelled = [s for s in spans if any(kv.key == "paragen.cancel_reason" for kv in s.attributes)]
    assert len(cancelled) == result["usage"]["num_cancelled"] == 2


def test_the_otel_environment_alone_turns_it_on_and_names_the_service(
    receiver: Receiver, tmp_path: Path
) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "sweep-7"}
    paragen_run(tmp_path, env=env)
    assert len(receiver.spans()) == 4 and receiver.services() == {"sweep-7"}
    paragen_run(tmp_path, env={**env, "OTEL_SDK_DISABLED": "true"})
    assert len(receiver.spans()) == 4  # disabled: nothing more sent


def test_a_bad_endpoint_is_one_line_and_exit_2(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "paragen.cli",
        "run",
        "2+2?",
        "-b",
        "scripted",
        "--otlp-endpoint",
        "localhost",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "bad --otlp-endpoint 'localhost'" in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])
def test_a_bad_endpoint_variable_is_refused_as_the_flag_is(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The variable the exporter would read is checked where tracing is turned on (here the Python
    API; the command line's case is in tests/core/test_bad_inputs.py), not left to fail in the
    exporter's thread after the run."""
    monkeypatch.setenv(variable, "not a url")
    with pytest.raises(ConfigError, match=f"bad {variable} 'not a url'"):
        tracing.configure()
    assert tracing.active is None
    with pytest.raises(ConfigError, match="bad --otlp-endpoint"):
        tracing.enable(endpoint="localhost:4318")  # the flag's value, checked the same way
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.configure() is None  # tracing off: the variable is not read, nor checked
