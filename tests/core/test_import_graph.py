"""The module graph, read from the source with ``ast`` (nothing is imported or executed).

Every import counts, wherever it sits: at module level, under ``if TYPE_CHECKING:`` and inside
functions. An import put in a function or behind TYPE_CHECKING still says "this module needs
that one"; counting it is what keeps a cycle from being hidden that way. The implicit import of
a parent package (``import paragen.types`` runs ``paragen/__init__.py`` first) is not an edge:
the package's ``__init__`` is the top of the graph, and no module under it imports it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What a strategy may import from paragen: the curated top level, and these submodules, which
# are documented as public (docs/plugins.md, "The public surface"): pure helpers, data types, the
# error tree and the plugin registry. Everything else (context internals, fanout, live,
# backends, orchestrator, engine) is the core's own business.
PUBLIC_SUBMODULES = frozenset(
    {
        "paragen.answers",
        "paragen.errors",
        "paragen.prompts",
        "paragen.reasoning",
        "paragen.registry",
        "paragen.scoring",
        "paragen.types",
    }
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def imported_names(path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (``from pkg import submodule`` resolved to the submodule)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield (full if full in known else node.module), node.lineno


def graph(package: str) -> dict[str, set[str]]:
    files = source_files(package)
    known = set(files)
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        edges[name] = {m for m, _ in imported_names(path, known) if m in known and m != name}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first = last), or None; iterative DFS with colours."""
    colour: dict[str, int] = dict.fromkeys(edges, 0)  # 0 unseen, 1 on the stack, 2 done
    for start in sorted(edges):
        if colour[start]:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
            elif colour[child] == 1:
                path = [n for n, _ in stack]
                return [*path[path.index(child) :], child]
            elif colour[child] == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(edges[child]))))
    return None


def test_no_import_cycle_inside_paragen() -> None:
    assert find_cycle(graph("paragen")) is None


def test_find_cycle_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_imports_neither_the_harness_nor_the_strategies() -> None:
    known = set(source_files("paragen"))
    offenders = [
        f"{name}:{line} imports {mod}"
        for name, path in source_files("paragen").items()
        for mod, line in imported_names(path, known)
        if mod.split(".")[0] in ("evals", "strategies")
    ]
    assert offenders == []


def test_strategies_use_only_the_public_api() -> None:
    known = set(source_files("paragen"))
    offenders = [
        f"{name}:{line} imports {mod}"
        for name, path in source_files("strategies").items()
        for mod, line in imported_names(path, known)
        if mod.split(".")[0] == "paragen" and mod != "paragen" and mod not in PUBLIC_SUBMODULES
    ]
    assert offenders == []


def test_the_public_submodules_exist() -> None:
    assert set(source_files("paragen")) >= PUBLIC_SUBMODULES


def test_no_import_cycle_inside_the_harness() -> None:
    assert find_cycle(graph("evals")) is None


def test_the_harness_imports_no_private_module() -> None:
    known = set(source_files("paragen")) | set(source_files("strategies"))
    offenders = [
        f"{name}:{line} imports {mod}"
        for name, path in source_files("evals").items()
        for mod, line in imported_names(path, known)
        if mod.split(".")[0] in ("paragen", "strategies") and any(p.startswith("_") for p in mod.split("."))
    ]
    assert offenders == []
