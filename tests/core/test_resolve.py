"""One resolver of ``module:attr`` specs: every user of one fails the same way on a bad spec."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from paragen.errors import ConfigError, PluginBrokenError, PluginNotFoundError
from paragen.registry import resolve
from paragen.scoring import load_trace_ranker
from paragen.scoring.rankers import shortest
from strategies._distill import agreement_scores, load_draft_ranker
from strategies.best_of_n import RANKER_KIND, BestOfN
from strategies.deepprune.judges import load_judge
from strategies.deepprune.judges.lexical import LexicalJudge
from strategies.llmcompiler.tools import load_tool
from strategies.pdr import PDR

# user -> (how it loads a spec, whether it takes a module:attr spec, a name it lists as available)
USERS: dict[str, tuple[Callable[[str], object], bool, str]] = {
    RANKER_KIND: (lambda spec: load_trace_ranker(spec, RANKER_KIND), True, "mean_logprob"),
    "pdr draft scorer": (load_draft_ranker, True, ""),
    "judge": (load_judge, True, "lexical"),
    "tool": (load_tool, False, "calculator"),  # a plan calls a tool by name: tools are names only
}
BAD = {
    "nomodule:x": "No module named 'nomodule'",
    "os:nosuch": "os has no attribute 'nosuch'",
    "noattr": None,
}


@pytest.mark.parametrize("kind", USERS)
@pytest.mark.parametrize("spec", BAD)
def test_a_bad_spec_is_the_same_one_line_error_from_every_user(kind: str, spec: str) -> None:
    load, takes_spec, listed = USERS[kind]
    with pytest.raises(PluginNotFoundError) as caught:
        load(spec)
    reason = BAD[spec] if takes_spec else None
    what = f"unknown {kind} {spec!r}" + (f": {reason}" if reason else "")
    line = caught.value.one_line()
    assert line.startswith(f"PluginNotFoundError: {what} (available: ")
    assert "\n" not in line and listed in line
    assert ("'package.module:attribute'" in line) == takes_spec


@pytest.mark.parametrize("spec", BAD)
def test_a_strategy_refuses_a_bad_ranker_when_configured(spec: str) -> None:
    for build, kind in ((BestOfN, RANKER_KIND), (PDR, "pdr draft scorer")):
        with pytest.raises(ConfigError, match=f"unknown {kind} '{spec}'"):
            build(scorer=spec)


def test_a_good_spec_names_the_object() -> None:
    assert load_trace_ranker("shortest") is shortest
    assert load_trace_ranker("paragen.scoring.rankers:shortest") is shortest
    assert load_draft_ranker("strategies._distill:agreement_scores") is cast(object, agreement_scores)
    assert isinstance(load_judge("strategies.deepprune.judges.lexical:LexicalJudge"), LexicalJudge)
    assert resolve("os.path:join.__name__", "thing") == "join"  # a dotted attribute


def test_a_spec_that_is_not_a_function_or_a_broken_module() -> None:
    with pytest.raises(ConfigError, match="best_of_n scorer 'os:sep' is not callable"):
        load_trace_ranker("os:sep", RANKER_KIND)
    with pytest.raises(ConfigError, match="pdr draft scorer 'os:sep' is not callable"):
        load_draft_ranker("os:sep")


def test_a_module_that_fails_at_import_is_reported_as_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pg_broken_ranker.py").write_text("1 / 0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pg_broken_ranker", raising=False)
    with pytest.raises(PluginBrokenError, match="ZeroDivisionError") as caught:
        load_trace_ranker("pg_broken_ranker:rank", RANKER_KIND)
    assert "\n" not in caught.value.one_line()
