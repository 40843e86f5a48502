"""`eval --shard I/N` and `paragen merge`: the split, the checks, and the merged folder's report.

The scripted backend's arithmetic responder answers each prompt the same way at a given seed,
so a sweep's records are the same whichever process runs a problem.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evals.cli import app
from evals.run.records import RECORDS_FILE, RUN_FILE, EvalRecord, read_records, read_run_info
from evals.run.shards import parse_shard, sweep_units
from paragen.errors import ConfigError

# Several eval runs, each starting its grading pool: minutes on 2 busy cores.
pytestmark = pytest.mark.timeout(900)
runner = CliRunner()
SWEEP = ["eval", "-t", "arith", "-s", "single,majority", "--n", "3", "--backend", "scripted", "--limit", "5",
         "--seeds", "0,1", "--no-progress", "--no-plot"]  # fmt: skip
UNITS = 5 * 2 * 2  # problems x configurations x seeds


def _eval(out: Path, *extra: str) -> None:
    result = runner.invoke(app, [*SWEEP, *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output


def _merge(out: Path, *shards: Path, extra: tuple[str, ...] = ()) -> Any:
    return runner.invoke(app, ["merge", str(out), *map(str, shards), *extra])


def _essence(records: list[EvalRecord]) -> list[tuple[Any, ...]]:
    return sorted((r.key, r.result.text, r.result.answer, r.grade.outcome) for r in records)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep run whole (``whole``) and as shards 1/3, 2/3, 3/3 (``s1``..``s3``); never modified."""
    root = tmp_path_factory.mktemp("sweep")
    _eval(root / "whole")
    for index in (1, 2, 3):
        _eval(root / f"s{index}", "--shard", f"{index}/3")
    return root


def _copy(sweep: Path, tmp_path: Path, *names: str) -> list[Path]:
    copies = []
    for name in names:
        shutil.copytree(sweep / name, tmp_path / name)
        copies.append(tmp_path / name)
    return copies


@pytest.mark.parametrize("text", ["3/2", "0/0", "x", "1/0", "-1/2", "1/2/3", ""])
def test_a_bad_shard_is_one_line_and_exit_2(tmp_path: Path, text: str) -> None:
    result = runner.invoke(app, [*SWEEP, "--shard", text, "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "--shard" in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_parse_shard_reads_i_of_n() -> None:
    shard = parse_shard("2/8")
    assert (shard.index, shard.count, str(shard)) == (2, 8, "2/8")
    assert [p for p in range(20) if shard.owns(p)] == [1, 9, 17]
    with pytest.raises(ConfigError, match="between 1 and N"):
        parse_shard("9/8")


def test_shards_split_every_unit_once_and_record_the_sweep(sweep: Path) -> None:
    infos = [read_run_info(sweep / f"s{i}") for i in (1, 2, 3)]
    assert {info.shard.sweep for info in infos if info.shard} == {
        infos[0].shard.sweep if infos[0].shard else ""
    }
    assert [info.shard.indices if info.shard else None for info in infos] == [[1], [2], [3]]
    assert not any(info.partial for info in infos)  # each holds every unit it owns
    keys = [r.key for i in (1, 2, 3) for r in read_records(sweep / f"s{i}")]
    assert len(keys) == len(set(keys)) == UNITS
    assert [len(read_records(sweep / f"s{i}")) for i in (1, 2, 3)] == [7, 7, 6]
    assert set(keys) == set(sweep_units(read_run_info(sweep / "whole")))


def test_merged_shards_equal_the_whole_run_and_report_like_it(sweep: Path, tmp_path: Path) -> None:
    result = _merge(tmp_path / "merged", sweep / "s3", sweep / "s1", sweep / "s2")  # any order
    assert result.exit_code == 0, result.output
    assert f"{UNITS} records of shards 1,2,3 of 3" in result.output
    merged = read_records(tmp_path / "merged")
    assert _essence(merged) == _essence(read_records(sweep / "whole"))
    info = read_run_info(tmp_path / "merged")
    assert info.shard is not None and info.shard.indices == [1, 2, 3] and len(info.shard.runs) == 3
    assert not info.partial
    assert {r.run_id for r in merged} == {info.run_id}
    assert [p.name for p in tmp_path.iterdir()] == ["merged"]  # no staging folder left beside it

    reports = []
    for folder in (tmp_path / "merged", sweep / "whole"):
        shown = runner.invoke(app, ["report", str(folder), "--format", "json"])
        assert shown.exit_code == 0, shown.output
        reports.append(json.loads(shown.stdout)["summary"])
    fields = ("strategy", "n", "settings_id", "num_problems", "accuracy", "seeds")
    assert [{k: row[k] for k in fields} for row in reports[0]] == [
        {k: row[k] for k in fields} for row in reports[1]
    ]


def test_merge_refuses_a_missing_shard_unless_partial_then_completes_later(
    sweep: Path, tmp_path: Path
) -> None:
    result = _merge(tmp_path / "m", sweep / "s1", sweep / "s3")
    assert result.exit_code == 2 and "1 of the sweep's 3 shards are missing: 2" in result.output
    assert not (tmp_path / "m").exists()

    assert _merge(tmp_path / "m13", sweep / "s1", sweep / "s3", extra=("--partial",)).exit_code == 0
    assert len(read_records(tmp_path / "m13")) == 7 + 6
    assert _merge(tmp_path / "all", tmp_path / "m13", sweep / "s2").exit_code == 0
    assert _essence(read_records(tmp_path / "all")) == _essence(read_records(sweep / "whole"))


def test_merge_refuses_a_shard_given_twice(sweep: Path, tmp_path: Path) -> None:
    twin = _copy(sweep, tmp_path, "s2")[0]
    result = _merge(tmp_path / "m", sweep / "s1", sweep / "s2", twin, sweep / "s3")
    assert result.exit_code == 2 and "shard 2/3 is given twice" in result.output
    assert not (tmp_path / "m").exists()


def test_merge_refuses_the_same_shard_folder_given_twice_as_given_twice(sweep: Path, tmp_path: Path) -> None:
    # Not "being written by" this merge itself: the folder's lock is taken once.
    result = _merge(tmp_path / "m", sweep / "s1", sweep / "s2", sweep / "s2" / ".", sweep / "s3")
    assert result.exit_code == 2 and "shard 2/3 is given twice" in result.output, result.output
    assert not (tmp_path / "m").exists()


def test_merge_refuses_a_record_duplicated_into_another_shard(sweep: Path, tmp_path: Path) -> None:
    s1, s2 = _copy(sweep, tmp_path, "s1", "s2")
    stolen = (s2 / RECORDS_FILE).read_text().splitlines(keepends=True)[0]
    with (s1 / RECORDS_FILE).open("a") as handle:
        handle.write(stolen)
    result = _merge(tmp_path / "m", s1, s2, sweep / "s3")
    assert result.exit_code == 2 and "holds 1 records of problems it does not own" in result.output
    assert not (tmp_path / "m").exists()


def test_merge_refuses_a_shard_with_a_problem_missing(sweep: Path, tmp_path: Path) -> None:
    s2 = _copy(sweep, tmp_path, "s2")[0]
    lines = (s2 / RECORDS_FILE).read_text().splitlines(keepends=True)
    (s2 / RECORDS_FILE).write_text("".join(lines[:-1]))
    result = _merge(tmp_path / "m", sweep / "s1", s2, sweep / "s3")
    assert result.exit_code == 2 and "s2 is not finished: 1 of 7 problems have no record" in result.output
    assert "--resume" in result.output and not (tmp_path / "m").exists()


def test_merge_refuses_shards_of_other_sweeps(sweep: Path, tmp_path: Path) -> None:
    _eval(tmp_path / "hot", "--shard", "2/3", "--temperature", "1.0")
    result = _merge(tmp_path / "m", sweep / "s1", tmp_path / "hot", sweep / "s3")
    assert result.exit_code == 2 and "not the same sweep" in result.output
    _eval(tmp_path / "half", "--shard", "2/2")
    assert "not the same sweep" in _merge(tmp_path / "m", sweep / "s1", tmp_path / "half").output
    result = _merge(tmp_path / "m", sweep / "s1", sweep / "whole")
    assert result.exit_code == 2 and "is not a shard" in result.output
    assert not (tmp_path / "m").exists()


def test_merge_refuses_an_output_that_holds_a_run(sweep: Path) -> None:
    result = _merge(sweep / "whole", sweep / "s1", sweep / "s2", sweep / "s3")
    assert result.exit_code == 2 and "already holds a run" in result.output


def test_a_shard_folder_continues_only_as_the_same_shard(sweep: Path, tmp_path: Path) -> None:
    s2 = _copy(sweep, tmp_path, "s2")[0]
    before = (s2 / RUN_FILE).read_text()
    for other in (["--shard", "1/3"], ["--shard", "2/4"], []):
        result = runner.invoke(app, [*SWEEP, *other, "--resume", "--out", str(s2)])
        assert result.exit_code == 2 and "holds shard 2 of 3 of sweep" in result.output, result.output
    more = runner.invoke(app, [*SWEEP, "--limit", "6", "--shard", "2/3", "--resume", "--out", str(s2)])
    assert more.exit_code == 2 and "not shard 2 of 3 of sweep" in more.output  # another sweep
    assert (s2 / RUN_FILE).read_text() == before
    _eval(s2, "--shard", "2/3", "--resume")  # the same shard: nothing left to run
    assert len(read_records(s2)) == 7


def test_a_shard_that_owns_nothing_ends_well_and_merges(tmp_path: Path) -> None:
    one = ["eval", "-t", "arith", "-s", "single", "--backend", "scripted", "--limit", "1", "--no-progress",
           "--no-plot"]  # fmt: skip
    for index in (1, 2):
        result = runner.invoke(app, [*one, "--shard", f"{index}/2", "--out", str(tmp_path / f"s{index}")])
        assert result.exit_code == 0, result.output
    assert "shard 2/2 owns no problem of this sweep" in result.output
    assert _merge(tmp_path / "m", tmp_path / "s1", tmp_path / "s2").exit_code == 0
    assert [r.problem.id for r in read_records(tmp_path / "m")] == [
        r.problem.id for r in read_records(tmp_path / "s1")
    ]
