"""Fixtures for the scorer tests: tiny random-init PRM and ORM checkpoints (tiny_models.py, built by
the root conftest's tiny_model; SmolLM2's smol_dir comes from there too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_prm(tiny_model: Callable[..., Path]) -> Path:
    from tiny_models import build_tiny_prm

    return build_tiny_prm(tiny_model)


@pytest.fixture(scope="session")
def tiny_orm(tiny_model: Callable[..., Path]) -> Path:
    from tiny_models import build_tiny_orm

    return build_tiny_orm(tiny_model)
