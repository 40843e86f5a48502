"""`paragen eval --named-backend NAME=SPEC`: a strategy reads with the named backend (reader=NAME),
samples on the run's own; run.json records both specs without credentials; every backend built is
closed; bad input is one line and exit code 2 before any backend is built."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from evals.cli import app
from paragen.backends.scripted import ScriptedBackend, arithmetic_responder
from paragen.registry import BACKEND_GROUP, register
from paragen.types import GenerateRequest

runner = CliRunner()
SECRET = "sk-named-0123456789"


class _Logged(ScriptedBackend):
    """A scripted backend kept by its target: "...reader..." names candidate 1, others do arithmetic."""

    built: ClassVar[dict[str, _Logged]] = {}

    def __init__(self, target: str) -> None:
        super().__init__(self._verdict if "reader" in target else arithmetic_responder)
        self.closed = False
        _Logged.built[target] = self

    @staticmethod
    def _verdict(request: GenerateRequest, index: int) -> str:
        return "Both look fine.\nJudgment: 1"

    @classmethod
    def from_spec(cls, target: str | None = None, **options: Any) -> _Logged:
        return cls(target or "")

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def logged() -> Iterator[dict[str, _Logged]]:
    register(BACKEND_GROUP, "t_logged", _Logged)
    _Logged.built.clear()
    yield _Logged.built
    _Logged.built.clear()


def _eval(out: Path, *args: str) -> Any:
    base = ["eval", "-t", "arith", "--limit", "2", "-s", "genselect", "-n", "2", "--seed", "0",
            "--backend", "t_logged:main", "--no-progress", "--no-plot", "--out", str(out)]  # fmt: skip
    return runner.invoke(app, [*base, *args])


def _prompts(backend: _Logged) -> list[str]:
    return [str(r.request.messages[-1].content) for r in backend.streams if r.request.messages]


def test_the_reading_goes_to_the_named_backend_and_run_json_records_it(
    tmp_path: Path, logged: dict[str, _Logged]
) -> None:
    named = f"judge=t_logged:http://user:{SECRET}@reader.test/v1"
    result = _eval(tmp_path / "r", "--named-backend", named, "-O", "genselect.reader=judge")
    assert result.exit_code == 0, result.output
    main, reader = logged["main"], logged["http://reader.test/v1"]  # the key left the URL
    assert sum(r.request.n for r in main.streams) == 2 * 2  # two candidates per problem, all on main
    assert len(reader.streams) == 2  # one reading pass per problem, all on the reader
    assert all("candidate solutions" in p for p in _prompts(reader))
    assert not any("candidate solutions" in p for p in _prompts(main))
    assert main.closed and reader.closed
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["settings"]["backend"] == "t_logged:main"
    assert info["settings"]["backends"] == {"judge": "t_logged:http://reader.test/v1"}
    records = [json.loads(line) for line in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    for record in records:
        picks = [t["meta"]["pick"] for t in record["result"]["traces"] if t["label"] == "select0"]
        assert len(picks) == 1 and record["strategy_config"]["reader"] == "judge"
    everything = result.output + "".join(p.read_text() for p in (tmp_path / "r").rglob("*.json*"))
    assert SECRET not in everything


def test_without_named_backends_the_settings_hash_as_before(tmp_path: Path) -> None:
    from evals.run.records import RunSettings, settings_id
    from paragen.config import Budget
    from paragen.types import SamplingParams

    plain = RunSettings(task="t", data_sha256="x", grading_mode="auto", backend="scripted",
                        sampling=SamplingParams(), budget=Budget())  # fmt: skip
    assert settings_id(plain, {}) == "6a7c03b480d3"  # the id runs recorded before named backends have
    named = plain.model_copy(update={"backends": {"judge": "scripted"}})
    assert settings_id(named, {}) != settings_id(plain, {})


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--named-backend", f"openai:http://u:{SECRET}@h/v1"], "bad --named-backend 'openai:http://h/v1'"),
        (["--named-backend", "=t_logged"], "bad --named-backend '=t_logged'"),
        (["--named-backend", "judge="], "bad --named-backend 'judge='"),
        (["--named-backend", "a b=t_logged"], "bad --named-backend 'a b=t_logged'"),
        (["--named-backend", "j=t_logged", "--named-backend", "j=t_logged:x"], "names 'j' twice"),
        (["--named-backend", "judge=nosuch"], "--named-backend judge: unknown backend 'nosuch'"),
        (["-O", "genselect.reader=judge"], "reads with backend 'judge', which was not given"),
        (
            ["-O", "genselect.reader=judge", "--named-backend", "other=t_logged:reader"],
            "give --named-backend judge=KIND[:TARGET]",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_backend_is_built(
    tmp_path: Path, logged: dict[str, _Logged], args: list[str], needle: str
) -> None:
    result = _eval(tmp_path / "r", *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output and result.output.strip().count("\n") == 0, result.output
    assert SECRET not in result.output
    assert logged == {} and not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def tiny_reader(tiny_model: Callable[..., Path]) -> Path:
    return tiny_model("tiny-reader", "LlamaForCausalLM", num_attention_heads=4, num_key_value_heads=2)


def test_the_engine_as_the_named_reader(tmp_path: Path, tiny_reader: Path) -> None:
    """The real path: the engine (a tiny random-init model) reads, built and closed with the sweep."""
    args = ["eval", "-t", "arith", "--limit", "1", "-s", "genselect", "-n", "2", "--backend", "scripted",
            "--named-backend", f"reader=engine:{tiny_reader}", "-O", "genselect.reader=reader",
            "-O", "genselect.reader_max_tokens=8", "--no-progress", "--no-plot",
            "--out", str(tmp_path / "r")]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "r" / "records.jsonl").read_text())
    reads = [t for t in record["result"]["traces"] if t["label"] == "select0"]
    assert len(reads) == 1 and reads[0]["status"] == "ok" and 0 < reads[0]["completion_tokens"] <= 8
    recorded = json.loads((tmp_path / "r" / "run.json").read_text())["settings"]["backends"]
    assert recorded == {"reader": f"engine:{tiny_reader}"}
    assert not [t for t in threading.enumerate() if t.name == "paragen-engine"]  # closed with the sweep
