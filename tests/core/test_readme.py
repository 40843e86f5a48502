"""The README's promises that can be checked without a model: its strategy table, its imports, its
commands and its links."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from paragen.registry import STRATEGY_GROUP, names

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_strategy_table_has_one_row_per_shipped_strategy() -> None:
    rows = re.findall(r"^\| `(\w+)` \|", _section("Strategies"), flags=re.MULTILINE)
    assert len(rows) == len(set(rows)), "a strategy has two rows"
    assert sorted(rows) == sorted(names(STRATEGY_GROUP))


def test_python_blocks_parse_and_their_imports_resolve() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)
    assert len(blocks) >= 3
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("my_pkg"):
                module = importlib.import_module(node.module)
                missing = [a.name for a in node.names if not hasattr(module, a.name)]
                assert not missing, f"from {node.module} import {missing}"


def test_the_two_commands_are_make_targets() -> None:
    makefile = (ROOT / "Makefile").read_text()
    commands = re.findall(r"^make (\w+)", _section("Two commands"), flags=re.MULTILINE)
    assert commands == ["demo", "test"]
    assert all(re.search(rf"^{c}:", makefile, flags=re.MULTILINE) for c in commands)


def test_linked_docs_exist() -> None:
    links = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert links, "the README links to docs/"
    assert [link for link in sorted(links) if not (ROOT / link).exists()] == []
