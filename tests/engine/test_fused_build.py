"""Where the fused attention's library is built, and what the engine does when it cannot be."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from paragen.engine.kernels import fused, fused_library

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test builds (or fails to build) its own; the next test finds the usual one again."""
    monkeypatch.delenv("PARAGEN_FUSED_ATTENTION", raising=False)
    fused_library.kernel.cache_clear()
    yield
    fused_library.kernel.cache_clear()


def test_without_a_compiler_the_torch_attention_stays(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    with caplog.at_level(logging.WARNING, logger="paragen.engine"):
        assert not fused.enabled(CPU, torch.bfloat16)
    assert "no C compiler" in caplog.text


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")
def test_built_once_into_the_cache_and_found_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(tmp_path))
    assert fused.enabled(CPU, torch.bfloat16)
    (built,) = (tmp_path / "kernels").glob("paged_attention-*.so")
    assert oct((tmp_path / "kernels").stat().st_mode & 0o777) == "0o700"
    assert not list((tmp_path / "kernels").glob(".*.tmp"))  # written whole, then renamed
    stamp = built.stat().st_mtime_ns
    fused_library.kernel.cache_clear()
    assert fused.enabled(CPU, torch.bfloat16)
    assert built.stat().st_mtime_ns == stamp  # loaded, not compiled again


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")
def test_a_cache_others_may_write_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "kernels"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)  # what a mkdir under a loose umask, or another user, may leave
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(tmp_path))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    assert fused.enabled(CPU, torch.bfloat16)  # built in a private temporary folder instead,
    assert not list(shared.iterdir())
    assert not list(scratch.iterdir())  # which is gone once the library is loaded


def test_off_by_switch_and_off_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARAGEN_FUSED_ATTENTION", "0")
    assert not fused.enabled(CPU, torch.bfloat16)
    monkeypatch.delenv("PARAGEN_FUSED_ATTENTION")
    assert not fused.enabled(torch.device("cuda"), torch.bfloat16)
    assert not fused.enabled(CPU, torch.float16)  # the kernel reads fp32 and bf16 caches only


def test_nowhere_to_build_it_keeps_the_torch_attention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A user without a home (``nobody``) and without a writable temporary folder."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(blocked))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with caplog.at_level(logging.WARNING, logger="paragen.engine"):
        assert not fused.enabled(CPU, torch.bfloat16)
    assert "could not be loaded" in caplog.text
