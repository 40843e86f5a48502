"""``python -m evals.cli``: the harness's commands without the rest of paragen's CLI."""

from evals.cli import app

app()
