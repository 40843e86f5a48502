"""Table-driven: every bad input to the CLI and the Python API fails the same way.

CLI cases run `python -m paragen.cli` in a real subprocess (in an empty folder) and each must end
with exit code 2, exactly one line on stderr naming the problem, no traceback anywhere, and no
file created or changed. API cases must raise the documented exception type with a message
naming the problem.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from echo_server import EchoServer, echo_server
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
from paragen.config import parse_backend_spec
from paragen.errors import PluginNotFoundError
from paragen.reasoning import split_thinking
from strategies.majority import Majority

# The first case waits for the module's shared run of every CLI case (subprocesses, 4 at a time).
pytestmark = pytest.mark.timeout(900)

Q = "What is 7 + 5?"
SCRIPTED = ["-b", "scripted"]
EVAL = ["eval", "-t", "arith", "-b", "scripted", "--limit", "3", "--no-progress", "--no-plot"]
OUT = ["--out", "{tmp}/run"]
TOO_MANY = "Input should be less than or equal to 1000000"


@dataclass
class Case:
    name: str
    argv: list[str]
    expected: str  # a piece of the one stderr line
    setup: Callable[[Path], None] | None = None
    marks: list[pytest.MarkDecorator] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _file(name: str, text: str = "x\n") -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        (tmp / name).write_text(text)

    return write


def _records_dir(text: str | None) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / "r").mkdir()
        if text is None:
            (tmp / "r" / "records.jsonl").mkdir()
        else:
            (tmp / "r" / "records.jsonl").write_text(text)

    return make


WRONG_TYPE_RECORD = (
    '{"schema": 1, "task": "arith", "strategy": "single", "n": "one", "problem": {"id": "a"}, '
    '"result": {"answer": 3}, "grade": {"correct": "yes"}}\n'
)

RUN_CASES = [
    Case("unknown strategy", ["run", Q, "-s", "nope", *SCRIPTED], "unknown strategy 'nope'"),
    Case("unknown backend", ["run", Q, "-b", "nope"], "unknown backend 'nope'"),
    Case("empty backend spec", ["run", Q, "-b", ""], "empty backend spec"),
    Case("malformed backend spec", ["run", Q, "-b", "1x:foo"], "bad backend spec"),
    Case("n zero", ["run", Q, "-n", "0", *SCRIPTED], "n: Input should be greater than or equal to 1"),
    Case("n negative", ["run", Q, "-n", "-3", *SCRIPTED], "n: Input should be greater than or equal to 1"),
    Case(
        "n above cap", ["run", Q, "-n", "100000", *SCRIPTED], "n: Input should be less than or equal to 1024"
    ),
    Case("n not a number", ["run", Q, "-n", "abc", *SCRIPTED], "'-n'"),
    Case("unknown flag", ["run", Q, "--bogus"], "No such option: --bogus"),
    Case("missing question", ["run"], "Missing argument"),
    Case("unknown command", ["nonexistent"], "No such command"),
    Case("empty question", ["run", "", *SCRIPTED], "the question is empty"),
    Case("blank question", ["run", "   ", *SCRIPTED], "the question is empty"),
    Case("non-UTF-8 question", ["run", "caf\udce9", *SCRIPTED], "not valid UTF-8"),
    Case("strategy option without =", ["run", Q, "-O", "foo", *SCRIPTED], "write KEY=VALUE"),
    Case("unknown strategy field", ["run", Q, "-O", "bogus=1", *SCRIPTED], "bogus: Extra inputs"),
    Case(
        "strategy field wrong type",
        ["run", Q, "-s", "ffs", "-O", "k=abc", *SCRIPTED],
        "k: Input should be a valid integer",
    ),
    Case("option for another strategy", ["run", Q, "-O", "ffs.k=2", *SCRIPTED], "not among the chosen"),
    Case("old --opt flag", ["run", Q, "--opt", "n=2", *SCRIPTED], "No such option: --opt"),
    Case("old -o for an option", ["run", Q, "-o", "n=2", *SCRIPTED], "looks like an option"),
    Case(
        "unknown scorer",
        ["run", Q, "-s", "best_of_n", "-O", "scorer=nope", *SCRIPTED],
        "unknown best_of_n scorer",
    ),
    Case(
        "threshold out of range",
        ["run", Q, "-s", "adaptive_consistency", "-O", "threshold=2", *SCRIPTED],
        "threshold",
    ),
    Case("single with n=2", ["run", Q, "-s", "single", "-n", "2", *SCRIPTED], "n: Input should be less than"),
    Case("ffs_k with k > n", ["run", Q, "-s", "ffs_k", "-n", "2", *SCRIPTED], "k=3 is more than n=2"),
    Case("negative temperature", ["run", Q, "--temperature", "-1", *SCRIPTED], "temperature"),
    Case("temperature not a number", ["run", Q, "--temperature", "hot", *SCRIPTED], "--temperature"),
    Case("max tokens zero", ["run", Q, "--max-tokens", "0", *SCRIPTED], "max-tokens"),
    Case("token budget negative", ["run", Q, "--max-total-tokens", "-10", *SCRIPTED], "max-total-tokens"),
    Case("deadline zero", ["run", Q, "--deadline", "0", *SCRIPTED], "deadline-s"),
    Case("seed not a number", ["run", Q, "--seed", "x", *SCRIPTED], "--seed"),
    Case("base url on engine", ["run", Q, "-b", "engine", "--base-url", "http://x"], "--base-url is for"),
    Case("missing script file", ["run", Q, "-b", "scripted:/nonexistent.jsonl"], "no script file"),
    Case("scripted options", ["run", Q, *SCRIPTED, "--backend-opt", "x=1"], "takes no options"),
    Case(
        "script file with a bad line",
        ["run", Q, "-b", "scripted:{tmp}/s.jsonl"],
        "s.jsonl line 2: text: Field required; token_delay: Input should be greater than or equal to 0",
        setup=_file("s.jsonl", '{"text": "4"}\n{"txt": "hello", "token_delay": -1}\n'),
    ),
    Case(
        "script file not JSON", ["run", Q, "-b", "scripted:{tmp}/s.jsonl"], "line 1", setup=_file("s.jsonl")
    ),
    Case(
        "ffs max_tokens above a request's cap",
        ["run", Q, "-s", "ffs", "-O", "max_tokens=2000000", *SCRIPTED],
        TOO_MANY,
    ),
    Case(
        "nothinking max_tokens above the cap",
        ["run", Q, "-s", "nothinking", "-O", "max_tokens=2000000", *SCRIPTED],
        TOO_MANY,
    ),
    Case(
        "budget_forcing think_tokens above the cap",
        ["run", Q, "-s", "budget_forcing", "-O", "think_tokens=1000000000000", *SCRIPTED],
        "think_tokens: " + TOO_MANY,
    ),
    Case(
        "OTLP endpoint variable not a URL",
        ["run", Q, *SCRIPTED],
        "bad OTEL_EXPORTER_OTLP_ENDPOINT 'not a url'",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"},
    ),
    Case("backend option without =", ["run", Q, *SCRIPTED, "--backend-opt", "x"], "bad --backend-opt"),
    Case(
        "two API keys",
        ["run", Q, "-b", "openai:http://u:k3y@127.0.0.1:9/v1", "--backend-opt", "api_key=x"],
        "two API keys",
    ),
    Case(
        "unreachable server",
        [
            "run",
            Q,
            "-b",
            "openai:http://127.0.0.1:9/v1",
            "-m",
            "m",
            "-n",
            "2",
            "--backend-opt",
            "max_retries=0",
        ],
        "127.0.0.1:9",
    ),
    Case("out is a folder", ["run", Q, *SCRIPTED, "--out", "{tmp}"], "it is a folder"),
    Case(
        "out in a missing folder", ["run", Q, *SCRIPTED, "--out", "{tmp}/no/r.json"], "not an existing folder"
    ),
    Case(
        "out under a file",
        ["run", Q, *SCRIPTED, "--out", "{tmp}/f/r.json"],
        "not an existing folder",
        setup=_file("f"),
    ),
    Case(
        "out cannot be written", ["run", Q, *SCRIPTED, "--out", "/proc/r.json"], "cannot write /proc/r.json"
    ),
    Case(
        "base URL without /v1",
        ["run", Q, "-b", "openai:{server}", "-n", "2"],
        "is not an OpenAI API base URL",
    ),
]

EVAL_CASES = [
    Case("unknown task", ["eval", "-t", "nosuch", *OUT], "unknown task 'nosuch'"),
    Case("missing --out", EVAL, "Missing option '--out'"),
    Case("n zero", [*EVAL, "-n", "0", *OUT], "bad --n"),
    Case("unknown strategy", [*EVAL, "-s", "nope", *OUT], "unknown strategy 'nope'"),
    Case("unknown backend", ["eval", "-t", "arith", "-b", "nope", *OUT], "unknown backend 'nope'"),
    Case(
        "option for no chosen strategy",
        [*EVAL, "-s", "single", "-O", "nosuch.n=1", *OUT],
        "'nosuch', which is not among the chosen strategies",
    ),
    Case("option without strategy misfits", [*EVAL, "-O", "majority=3", *OUT], "majority: Extra inputs"),
    Case("n as a strategy option", [*EVAL, "-s", "majority", "-O", "majority.n=4", *OUT], "n is set with -n"),
    Case("n repeated", [*EVAL, "-s", "majority", "-n", "2,2", *OUT], "--n lists 2 twice"),
    Case("strategy repeated", [*EVAL, "-s", "majority,majority", *OUT], "lists 'majority' twice"),
    Case("limit negative", [*EVAL, "--limit", "-1", *OUT], "bad --limit -1"),
    Case("limit zero", [*EVAL, "--limit", "0", *OUT], "bad --limit 0"),
    Case("offset negative", [*EVAL, "--offset", "-3", *OUT], "bad --offset -3"),
    Case("max concurrent zero", [*EVAL, "--max-concurrent", "0", *OUT], "bad --max-concurrent 0"),
    Case("max concurrent negative", [*EVAL, "--max-concurrent", "-2", *OUT], "bad --max-concurrent -2"),
    Case("ffs_k k > n in a sweep", [*EVAL, "-s", "single,ffs_k", "-n", "4,2", *OUT], "k=3 is more than n=2"),
    Case("out is a file", [*EVAL, "--out", "{tmp}/f"], "it is a file", setup=_file("f")),
    Case("out under a file", [*EVAL, "--out", "{tmp}/f/run"], "is a file", setup=_file("f")),
    Case("out cannot be created", [*EVAL, "--out", "/proc/paragen-test/run"], "cannot create"),
    Case("negative temperature", [*EVAL, "--temperature", "-1", *OUT], "temperature"),
    Case("old shuffle syntax", [*EVAL, "--shuffle", "--seed", "3", *OUT], "--shuffle"),
    Case("backend options as JSON", [*EVAL, "--backend-opt", "api_key=12345678", *OUT], "takes no options"),
    Case(
        "empty user data",
        ["eval", "-t", "{tmp}/d.jsonl", *SCRIPTED, *OUT],
        "d.jsonl",
        setup=_file("d.jsonl", ""),
    ),
    Case(
        "malformed user JSONL",
        ["eval", "-t", "{tmp}/d.jsonl", *SCRIPTED, *OUT],
        "d.jsonl",
        setup=_file("d.jsonl", "not json\n"),
    ),
    Case(
        "corrupt parquet",
        ["eval", "-t", "{tmp}/d.parquet", *SCRIPTED, *OUT],
        "d.parquet",
        setup=_file("d.parquet", "PAR1garbage"),
    ),
]

REPORT_CASES = [
    Case("missing run folder", ["report", "{tmp}/none"], "no records"),
    Case("folder without records", ["report", "{tmp}"], "no records"),
    Case("unknown format", ["report", "{tmp}/r", "-f", "xml"], "unknown format", setup=_records_dir("")),
    Case(
        "record {}",
        ["report", "{tmp}/r"],
        "records.jsonl",
        setup=_records_dir("{}\n"),
    ),
    Case(
        "record with wrong types",
        ["report", "{tmp}/r"],
        "records.jsonl",
        setup=_records_dir(WRONG_TYPE_RECORD),
    ),
    Case(
        "records.jsonl is a folder",
        ["report", "{tmp}/r"],
        "records.jsonl",
        setup=_records_dir(None),
    ),
]

CLI_CASES = [
    Case(f"{c.argv[0]} {c.name}", c.argv, c.expected, c.setup, c.marks, c.env)
    for c in RUN_CASES + EVAL_CASES + REPORT_CASES
]


@pytest.fixture(scope="module")
def server() -> Iterator[EchoServer]:
    with echo_server() as running:
        yield running


def paragen(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    """The real CLI in a subprocess (bytes, so a non-UTF-8 argument goes through as the shell gives it).

    A run that does not end in time (a bad flag silently accepted, a whole task run) is an outcome
    with returncode -1, so it fails its own case only.
    """
    command: list[str | bytes] = [sys.executable, "-m", "paragen.cli", *(os.fsencode(a) for a in argv)]
    try:
        return subprocess.run(
            command, cwd=cwd, capture_output=True, env={**os.environ, "COLUMNS": "200", **env}, timeout=90
        )
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(command, -1, exc.stdout or b"", exc.stderr or b"")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"/" for p in root.rglob("*")}


@dataclass
class Outcome:
    done: subprocess.CompletedProcess[bytes]
    before: dict[str, bytes]
    after: dict[str, bytes]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory, server: EchoServer) -> dict[str, Outcome]:
    """Every CLI case run once, several subprocesses at a time (each is mostly interpreter start-up)."""

    # Folders made here, not in the threads: pytest's mktemp is not safe to call concurrently.
    works = {case.name: tmp_path_factory.mktemp("case") for case in CLI_CASES}

    def run_case(case: Case) -> Outcome:
        work = works[case.name]
        if case.setup is not None:
            case.setup(work)
        before = snapshot(work)
        argv = [a.replace("{tmp}", str(work)).replace("{server}", server.root) for a in case.argv]
        done = paragen(argv, cwd=work, **case.env)
        return Outcome(done, before, snapshot(work))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip([c.name for c in CLI_CASES], pool.map(run_case, CLI_CASES), strict=True))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in CLI_CASES])
def test_cli_bad_input(case: Case, outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes[case.name]
    err = outcome.done.stderr.decode("utf-8", "replace").strip()
    out = outcome.done.stdout.decode("utf-8", "replace")
    assert outcome.done.returncode == 2, f"{case.name}: exit {outcome.done.returncode}, stderr {err!r}"
    assert "Traceback" not in err + out, f"{case.name}: {err}"
    assert len(err.splitlines()) == 1, f"{case.name}: not one line: {err!r}"
    assert case.expected in err, f"{case.name}: {err!r}"
    assert outcome.after == outcome.before, f"{case.name}: files were written"


def test_broken_plugin_is_reported_and_the_rest_listed(tmp_path: Path) -> None:
    """An entry point naming an attribute that does not exist: that plugin is marked, the others listed."""
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[paragen.strategies]\nbroken = strategies.single:NoSuchClass\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    listing = paragen(["strategies"], cwd=tmp_path, PYTHONPATH=path)
    text = listing.stdout.decode()
    assert listing.returncode == 0, listing.stderr.decode()
    assert "broken" in text and "NoSuchClass" in text and "Traceback" not in text
    assert "majority" in text and "ffs_k" in text and "single" in text
    chosen = paragen(["run", Q, "-s", "broken", *SCRIPTED], cwd=tmp_path, PYTHONPATH=path)
    err = chosen.stderr.decode().strip()
    assert chosen.returncode == 2 and len(err.splitlines()) == 1 and "'broken' is broken" in err


def test_backends_listing_shows_each_backends_options(tmp_path: Path) -> None:
    listing = paragen(["backends"], cwd=tmp_path).stdout.decode()
    assert all(name in listing for name in ("openai", "engine", "scripted"))
    text = paragen(["backends", "openai"], cwd=tmp_path).stdout.decode()
    assert "api_key (None)" in text and "base_url (required)" in text
    assert "kv_cache_mb" in paragen(["backends", "engine"], cwd=tmp_path).stdout.decode()
    assert "no options" in paragen(["backends", "scripted"], cwd=tmp_path).stdout.decode()


def test_out_for_run_is_checked_before_any_token(tmp_path: Path, server: EchoServer) -> None:
    """`run --out` into a folder: refused before the backend is asked anything."""
    seen = len(server.seen_auth)
    done = paragen(["run", Q, "-b", f"openai:{server.root}/v1", "--out", str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 2 and b"it is a folder" in done.stderr
    assert len(server.seen_auth) == seen


def test_good_run_writes_the_whole_result(tmp_path: Path) -> None:
    done = paragen(["run", Q, *SCRIPTED, "-n", "4", "-o", str(tmp_path / "result.json")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert b"answer" in done.stdout
    assert '"strategy": "majority"' in (tmp_path / "result.json").read_text()
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
    ("unknown sampling field", lambda: SamplingParams(temprature=0.5), ValidationError, "temprature"),  # type: ignore[call-arg]
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
    ("ffs_k with k > n", lambda: build_strategy("ffs_k", {"n": 2}), ConfigError, "k=3 is more than n=2"),
    ("ffs with k > n", lambda: build_strategy("ffs", {"n": 2, "k": 5}), ConfigError, "k=5 is more than n=2"),
    (
        "zero problem limit",
        lambda: Orchestrator(ScriptedBackend(), max_concurrent_problems=0),
        ValueError,
        "max_concurrent_problems",
    ),
    ("empty backend spec", lambda: parse_backend_spec(""), ConfigError, "empty backend spec"),
    ("scripted empty table", lambda: ScriptedBackend([]), ConfigError, "at least one script"),
    (
        "strategy token count above a request's cap",
        lambda: build_strategy("budget_forcing", {"think_tokens": 10**12}),
        ConfigError,
        "think_tokens: " + TOO_MANY,
    ),
    (
        "metrics not a Metrics",
        lambda: Orchestrator(ScriptedBackend(), metrics="prometheus"),  # type: ignore[arg-type]
        ConfigError,
        "metrics must be a paragen.metrics.Metrics or None, got str",
    ),
    (
        "unknown thinking format",
        lambda: split_thinking("<think>a</think>b", "deepseek"),  # type: ignore[arg-type]
        ConfigError,
        "unknown thinking format 'deepseek' (one of think, think_open, gpt_oss, none)",
    ),
]


@pytest.mark.parametrize(("case", "make", "error", "expected"), API_CASES, ids=[c[0] for c in API_CASES])
def test_api_bad_input(case: str, make: Callable[[], object], error: type[Exception], expected: str) -> None:
    with pytest.raises(error) as info:
        make()
    assert expected in str(info.value), f"{case}: {info.value}"


def test_solve_with_a_backend_name_names_the_real_error(tmp_path: Path) -> None:
    """`solve(..., backend=NAME)` takes a spec (tests/core/test_api.py runs "scripted"); a name that
    is no backend gives that mistake, not "Attempted to exit a cancel scope".

    In a subprocess: a failure that leaked memory streams would warn inside later tests.
    """
    code = (
        "import paragen\n"
        "try:\n    paragen.solve('2+2', backend='nosuch')\n"
        "except Exception as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path, timeout=120)
    assert b"nosuch" in done.stdout and b"cancel scope" not in done.stdout + done.stderr, done


def test_option_values_are_read_as_the_fields_type() -> None:
    """A text field keeps digits as text (an API key); other fields read JSON; none goes unnoticed."""
    from paragen.backends.openai import OpenAIBackend
    from paragen.cli_options import choose_backend, parse_strategy_options

    choice = choose_backend(
        "openai:http://127.0.0.1:9/v1",
        model=None,
        base_url=None,
        options=["api_key=12345678", "max_retries=0", 'extra_body={"min_p": 0.1}', "model=0123"],
    )
    backend = choice.build()
    assert isinstance(backend, OpenAIBackend)
    config = backend.config
    assert config.api_key is not None and config.api_key.get_secret_value() == "12345678"
    assert config.model == "0123"
    assert config.max_retries == 0 and config.extra_body == {"min_p": 0.1}
    assert choice.shown == "openai:http://127.0.0.1:9/v1"
    anyio.run(backend.aclose)
    grouped = parse_strategy_options(["temperature=0.5", "ffs.k=2", "ffs.order=last"], ["ffs", "majority"])
    assert grouped == {"ffs": {"temperature": 0.5, "k": 2, "order": "last"}, "majority": {"temperature": 0.5}}


def test_eval_api_refuses_zero_concurrency_before_writing(tmp_path: Path) -> None:
    from evals.run.combos import build_combos
    from evals.run.runner import run_eval
    from evals.run.spec import BackendSetup, EvalSpec, Execution, RunFolder
    from evals.tasks import Selection, get_task, load_task

    task = get_task("arith")
    loaded = load_task(task, Selection(limit=2), source="bundled")
    spec = EvalSpec(
        task=task,
        problems=loaded.problems,
        data=loaded.source,
        combos=build_combos(["single"], [1]),
        backend=BackendSetup("scripted"),
        folder=RunFolder(tmp_path / "run"),
        execution=Execution(max_concurrent=0),
    )
    with pytest.raises(ValueError, match="max_concurrent_problems"):
        anyio.run(run_eval, spec, ScriptedBackend())
    assert not (tmp_path / "run").exists()
