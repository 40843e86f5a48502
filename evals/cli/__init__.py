"""The harness's commands, one module each: `paragen eval` (evals.cli.eval), `paragen report`
(evals.cli.report), `paragen merge` (evals.cli.merge: the join of a sharded sweep's run folders)
`paragen presets` (evals.cli.presets) and `paragen tasks` (evals.cli.tasks).

``register(app)`` adds them to the paragen CLI (the entry point ``evals.cli:register``);
``python -m evals.cli`` runs them alone.
"""

from __future__ import annotations

import typer

from evals.cli.eval import eval_command
from evals.cli.merge import merge_command
from evals.cli.presets import presets_command
from evals.cli.report import report_command
from evals.cli.tasks import tasks_command


def register(app: typer.Typer) -> None:
    """Add `eval`, `report`, `merge`, `presets` and `tasks` to a typer app (as the paragen CLI does)."""
    app.command("eval")(eval_command)
    app.command("report")(report_command)
    app.command("merge")(merge_command)
    app.command("presets")(presets_command)
    app.command("tasks")(tasks_command)


app = typer.Typer(add_completion=False, no_args_is_help=True, help="paragen's eval harness")
register(app)
