"""Tasks load through `datasets` from bundled copies, generated rows, or the user's own files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.tasks import Selection, get_task, load_problems, load_rows
from evals.tasks.arith import generate_rows
from paragen.errors import ConfigError


@pytest.mark.parametrize(("name", "rows"), [("gsm8k", 1219), ("math500", 500), ("aime24", 30), ("amc23", 40)])
def test_bundled_benchmarks_load_offline(name: str, rows: int) -> None:
    task = get_task(name)
    loaded = load_rows(task, "bundled")
    assert loaded.source.kind == "bundled" and loaded.source.rows == len(loaded.rows) == rows
    assert loaded.source.file_sha256 is not None and len(loaded.source.rows_sha256) == 64
    first = load_problems(task, Selection(limit=2), offline=True)
    assert len(first) == 2 and all(p.gold for p in first) and first[0].meta["task"] == name


def test_aime25_says_in_one_line_that_it_needs_the_hub() -> None:
    with pytest.raises(ConfigError) as info:
        load_problems(get_task("aime25"), offline=True)
    line = info.value.one_line()
    assert "\n" not in line and "no bundled copy" in line and "held out" in line
    assert "math-ai/aime25" in line and "--offline" in line


def test_selection_offset_limit_ids_and_seeded_shuffle() -> None:
    task = get_task("amc23")
    all_ids = [p.id for p in load_problems(task, offline=True)]
    assert [p.id for p in load_problems(task, Selection(offset=5, limit=3), offline=True)] == all_ids[5:8]
    picked = load_problems(task, Selection(ids=[all_ids[7], all_ids[2]]), offline=True)
    assert {p.id for p in picked} == {all_ids[7], all_ids[2]}
    one = [p.id for p in load_problems(task, Selection(shuffle=True, seed=3), offline=True)]
    assert one == [p.id for p in load_problems(task, Selection(shuffle=True, seed=3), offline=True)]
    assert one != all_ids and sorted(one) == sorted(all_ids)
    with pytest.raises(ConfigError, match="no problem with id"):
        load_problems(task, Selection(ids=["nope"]), offline=True)
    with pytest.raises(ConfigError, match="selection is empty"):
        load_problems(task, Selection(offset=1000), offline=True)


def test_arith_is_seeded_and_mixes_levels() -> None:
    assert generate_rows(20, seed=1) == generate_rows(20, seed=1)
    assert generate_rows(20, seed=1) != generate_rows(20, seed=2)
    problems = load_problems(get_task("arith"), Selection(limit=10))
    assert sorted({p.meta["level"] for p in problems}) == [1, 2, 3, 4, 5]
    for row in generate_rows(50, seed=4):  # every answer is what Python computes from the question
        if row["level"] <= 4:
            expression = row["problem"].removeprefix("What is ").rstrip("?")
            assert str(eval(expression)) == row["answer"]


def test_user_files_become_tasks(tmp_path: Path) -> None:
    rows = [{"q": f"What is {i} + 1?", "a": str(i + 1), "key": f"k{i}"} for i in range(4)]
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = get_task(str(jsonl), question="q", answer="a", id_field="key", grading="last_number")
    problems = load_problems(task)
    assert [p.id for p in problems] == ["k0", "k1", "k2", "k3"] and problems[2].gold == "3"
    assert task.grading == "last_number"
    csv_file = tmp_path / "mine.csv"
    csv_file.write_text("q,a\nWhat is 2 + 2?,4\n")
    assert load_problems(get_task(str(csv_file), question="q", answer="a"))[0].gold == "4"
    import datasets

    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "mine.parquet"))
    assert len(load_problems(get_task(str(tmp_path / "mine.parquet"), question="q", answer="a"))) == 4


def test_bad_task_inputs_give_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown task"):
        get_task("nonsense")
    with pytest.raises(ConfigError, match="does not exist"):
        get_task(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ConfigError, match="unknown grading mode"):
        get_task("gsm8k", grading="fuzzy")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "x", "answer": "1"}) + "\n")
    with pytest.raises(ConfigError, match="no question field 'problem'"):
        load_problems(get_task(str(bad)))
