"""`vllm serve --runner pooling` of the tiny reward models on loopback, for the vLLM scorer tests.

Reuses tests/backends/real_servers.py (the vLLM venv's interpreter, its CPU settings, the Server
handle); imported by path, as each test folder is its own top of the import path.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_BACKENDS = str(Path(__file__).resolve().parents[1] / "backends")
if _BACKENDS not in sys.path:
    sys.path.append(_BACKENDS)
real_servers: Any = importlib.import_module("real_servers")

SERVED = "tiny-rm"
MAX_NUM_SEQS = 8  # vLLM's running batch: what a cancellation test may see computed unread


def start_reward_server(model: Path, log: Path, *, step_tag_id: int | None = None) -> Any:
    """A real_servers.Server of ``model`` with vLLM's pooling runner, in float32 (this CPU has no
    native bf16, and the scores are compared with transformers' fp32)."""
    python, port = real_servers.vllm_python(), real_servers.free_port()
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    command += ["--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--runner", "pooling", "--dtype", "float32", "--max-model-len", "1024"]
    command += ["--max-num-seqs", str(MAX_NUM_SEQS), "--enforce-eager", "--disable-uvicorn-access-log"]
    if step_tag_id is not None:  # vLLM's default is Qwen's <extra_0> (151651), not this tokenizer's
        command += ["--pooler-config", json.dumps({"step_tag_id": step_tag_id})]
    env = real_servers.vllm_env()
    process = real_servers._spawn(command, log, env)
    server = real_servers.Server(f"http://127.0.0.1:{port}/v1", process, log, command, env)
    try:
        server.wait_ready(600.0)
    except BaseException:
        server.stop()
        raise
    return server


def step_tag_id(model: Path, step_tag: str) -> int:
    transformers: Any = importlib.import_module("transformers")
    ids = transformers.AutoTokenizer.from_pretrained(model).encode(step_tag, add_special_tokens=False)
    if len(ids) != 1:
        pytest.fail(f"{step_tag!r} is not one token in {model}")
    return int(ids[0])
