"""Fixtures for the scorer tests: tiny random-init PRM and ORM checkpoints (tiny_models.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from paragen.engine import loader


@pytest.fixture(scope="session")
def smol_dir() -> Path:
    try:
        loader.default_model_path()
    except Exception as exc:
        pytest.skip(f"default model not installed: {exc}")
    return loader.resolve(None)


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory: pytest.TempPathFactory, smol_dir: Path) -> Path:
    from tiny_models import build_tiny_prm

    return build_tiny_prm(tmp_path_factory.mktemp("prm") / "prm", smol_dir)


@pytest.fixture(scope="session")
def tiny_orm(tmp_path_factory: pytest.TempPathFactory, smol_dir: Path) -> Path:
    from tiny_models import build_tiny_orm

    return build_tiny_orm(tmp_path_factory.mktemp("orm") / "orm", smol_dir)
