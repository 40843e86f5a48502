"""The harness's commands, one module each: `paragen eval` (evals.cli.eval), `paragen report`
(evals.cli.report), `paragen merge` (evals.cli.merge: the join of a sharded sweep's run folders)
and `paragen presets` (evals.cli.presets).

``register(app)`` adds them to the paragen CLI (the entry point ``evals.cli:register``);
``python -m evals.cli`` runs them alone.
"""

from __future__ import annotations

import typer

from evals.cli.eval import eval_command
from evals.cli.merge import merge_command
from evals.cli.presets import presets_command
from evals.cli.report import report_command


def register(app: typer.Typer) -> None:
    """Add `eval`, `report`, `merge` and `presets` to a typer app (the paragen CLI mounts them this way)."""
    app.command("eval")(eval_command)
    app.command("report")(report_command)
    app.command("merge")(merge_command)
    app.command("presets")(presets_command)


app = typer.Typer(add_completion=False, no_args_is_help=True, help="paragen's eval harness")
register(app)
