"""A model folder whose config.json is broken: one ConfigError naming the file and what is wrong,
from ``EngineBackend.from_spec`` and from ``paragen run -b engine:FOLDER`` (exit 2, one line, no
traceback), on a real checkpoint saved to disk with only its config.json spoilt."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from paragen.backends.engine import EngineBackend
from paragen.errors import ConfigError

TinyModel = Callable[..., Path]


def _dropped(field: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        config: dict[str, Any] = json.loads(text)
        del config[field]
        return json.dumps(config)

    return edit


def _wrong_type(text: str) -> str:
    return json.dumps({**json.loads(text), "hidden_size": "wide"})


SPOILS: dict[str, tuple[Callable[[str], str], str]] = {
    "not JSON": (lambda text: text[: len(text) // 2], "config.json is not JSON"),
    "not an object": (lambda text: "[1, 2]", "config.json is not a JSON object"),
    "no num_attention_heads": (_dropped("num_attention_heads"), "config.json has no 'num_attention_heads'"),
    "no vocab_size": (_dropped("vocab_size"), "config.json has no 'vocab_size'"),
    "a field of the wrong type": (_wrong_type, "config.json holds an unusable value (ValueError:"),
}


@pytest.fixture(scope="module")
def checkpoint(tiny_model: TinyModel) -> Path:
    return tiny_model("whole", "LlamaForCausalLM", num_attention_heads=4, num_key_value_heads=2)


def spoilt(checkpoint: Path, tmp_path: Path, spoil: Callable[[str], str]) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(checkpoint, folder)
    config = folder / "config.json"
    config.write_text(spoil(config.read_text()))
    return folder


def test_the_whole_checkpoint_loads(checkpoint: Path) -> None:
    """The witness: the folder the cases spoil loads as it is."""
    backend = EngineBackend.from_spec(str(checkpoint), num_blocks=8)
    assert backend.engine.cfg.num_heads == 4
    anyio.run(backend.aclose)


@pytest.mark.parametrize("case", list(SPOILS))
def test_from_spec_names_the_broken_config(case: str, checkpoint: Path, tmp_path: Path) -> None:
    spoil, expected = SPOILS[case]
    folder = spoilt(checkpoint, tmp_path, spoil)
    with pytest.raises(ConfigError) as info:
        EngineBackend.from_spec(str(folder), num_blocks=8)
    assert expected in str(info.value) and str(folder) in str(info.value)


@pytest.mark.parametrize("case", ["not JSON", "no num_attention_heads"])
def test_cli_says_it_in_one_line(case: str, checkpoint: Path, tmp_path: Path) -> None:
    spoil, expected = SPOILS[case]
    folder = spoilt(checkpoint, tmp_path, spoil)
    done = subprocess.run(
        [sys.executable, "-m", "paragen.cli", "run", "What is 7 + 5?", "-b", f"engine:{folder}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    err = done.stderr.strip()
    assert done.returncode == 2, err
    assert "Traceback" not in err + done.stdout and len(err.splitlines()) == 1, err
    assert expected in err, err
