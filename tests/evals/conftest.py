"""Fixtures of the harness tests: one grading pool for the whole folder (starting one costs seconds)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evals.run.grading import Grader

os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def grader() -> Iterator[Grader]:
    with Grader(workers=2, timeout_s=10.0) as pool:
        yield pool
