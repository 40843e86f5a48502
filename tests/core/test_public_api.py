"""The public surface: curated __all__, and a CLI that does not import heavy libraries for --help."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import paragen


def test_all_names_resolve_and_are_curated() -> None:
    assert sorted(paragen.__all__) == sorted(set(paragen.__all__))
    for name in paragen.__all__:
        assert hasattr(paragen, name), name
    assert {"Orchestrator", "RunContext", "Problem", "StrategyResult", "build_strategy", "Backend"} <= set(
        paragen.__all__
    )
    # what a strategy needs beyond the context itself (tests/core/test_import_graph.py holds them to it)
    assert {"ChildTasks", "Fanout", "LiveSample", "Monitor", "BaseStrategy", "StrategyConfig"} <= set(
        paragen.__all__
    )


def test_the_context_keeps_the_backend_and_the_ledger_to_itself() -> None:
    from paragen.backends.scripted import ScriptedBackend

    ctx = paragen.RunContext(ScriptedBackend(["a"]), paragen.Problem(question="q"))
    public = {name for name in dir(ctx) if not name.startswith("_")}
    assert not public & {"backend", "ledger", "new_trace", "charge", "check_budget", "ended"}
    assert {"capabilities", "sample", "fanout", "concurrently", "run_strategy", "run_strategies"} <= public


def test_help_and_listing_do_not_import_torch_or_vllm() -> None:
    code = (
        "import sys\n"
        "from paragen.cli import main\n"
        "for argv in (['--help'], ['strategies'], ['run', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), exc.code\n"
        "print('HEAVY', sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout
    assert "Usage" in out.stdout


def _surface_paragraph(opening: str) -> str:
    page = (Path(__file__).parents[2] / "docs" / "plugins.md").read_text()
    start = page.index(opening)
    end = page.find("\n\n", start)
    return page[start : end if end != -1 else None]


def test_all_is_exactly_the_surface_the_docs_name() -> None:
    surface = _surface_paragraph("The public surface.")
    named = surface.split("is exactly", 1)[1].split("(`tests/core", 1)[0]
    assert sorted(re.findall(r"`([\w]+)`", named)) == sorted(paragen.__all__)


def test_every_core_module_is_private_by_name_or_named_public_in_the_docs() -> None:
    surface = _surface_paragraph("The public surface.")
    public = {m for m in re.findall(r"`paragen\.(\w+)`", surface) if not m.startswith("_")}
    root = Path(paragen.__file__).parent
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    unmarked = {m for m in modules if not m.startswith("_")}
    assert unmarked == public, "name a new core module _private, or list it in docs/plugins.md as public"
    helpers = {p.stem for p in (root.parent / "strategies").glob("*.py") if not p.stem.startswith("_")}
    registered = {ep.value.split(":")[0].split(".")[1] for ep in entry_points(group="paragen.strategies")}
    named = {m for m in re.findall(r"`strategies\.(\w+)`", surface) if not m.startswith("_")}
    stray = sorted(helpers - registered - named)
    assert stray == [], f"strategy helpers neither named private nor listed in docs/plugins.md: {stray}"
