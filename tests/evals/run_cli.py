"""`python tests/evals/run_cli.py eval ...`: the harness CLI with the test strategies registered."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evals_helpers import register_test_strategies

if __name__ == "__main__":
    register_test_strategies()
    from evals.cli import app

    app()
