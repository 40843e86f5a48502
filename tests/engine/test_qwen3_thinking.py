"""Qwen3's thinking switch: the chat template, the engine backend's ``enable_thinking`` option, and
``paragen run -b engine:PATH`` end to end on a tiny random Qwen3 (greedy text equal to HF's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

import paragen
from paragen.backends.engine import EngineBackend
from paragen.errors import ConfigError
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

QUESTION = "What is 2 + 3?"
EMPTY_THINKING = "<think>\n\n</think>\n\n"
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<think>\nthey greet\n</think>\n\nHello."},
    {"role": "user", "content": "2+3?"},
]
RENDERED = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    # thinking of a turn before the last question is dropped, as Qwen3's own template does
    "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.mark.parametrize(
    ("switch", "opening"),
    [({}, ""), ({"enable_thinking": True}, ""), ({"enable_thinking": False}, EMPTY_THINKING)],
)
def test_the_template_prefills_empty_thinking_only_when_switched_off(
    tiny_qwen3: Path, switch: dict[str, Any], opening: str
) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_qwen3)
    text = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True, **switch)
    assert text == RENDERED + opening
    # the thinking delimiters are single tokens kept in decoded text, as in Qwen3's tokenizer
    ids = tokenizer(EMPTY_THINKING, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == EMPTY_THINKING and tokenizer.convert_ids_to_tokens(ids[0]) == "<think>"


def test_an_answer_after_the_last_question_keeps_its_thinking(tiny_qwen3: Path) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_qwen3)
    chat = [*CHAT, {"role": "assistant", "content": "<think>\nadd\n</think>\n\n5"}]
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    assert text == RENDERED + "<think>\nadd\n</think>\n\n5<|im_end|>\n"


@pytest.mark.anyio
@pytest.mark.parametrize("enable_thinking", [None, True, False])
async def test_the_backend_option_reaches_every_rendering(
    tiny_qwen3: Path, enable_thinking: bool | None
) -> None:
    """Requests and Hogwild! sessions render with the switch the backend was built with."""
    backend = EngineBackend.from_spec(
        str(tiny_qwen3), dtype="float32", num_blocks=32, enable_thinking=enable_thinking
    )
    try:
        messages = solve_messages(QUESTION)
        ids = backend.prompt_ids(GenerateRequest(messages=messages, params=SamplingParams(max_tokens=4)))
        text = backend.engine.tokenizer.decode(ids)
        assert text.endswith("<|im_start|>assistant\n" + (EMPTY_THINKING if enable_thinking is False else ""))
        async with backend.shared_session(SamplingParams(temperature=0.0), num_workers=1) as session:
            assert session.apply_chat_template([m.model_dump() for m in messages]) == text
    finally:
        await backend.aclose()


def test_a_template_without_the_switch_is_refused(tiny_llama: Path) -> None:
    with pytest.raises(ConfigError, match="chat template has no thinking switch"):
        EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=8, enable_thinking=False)


def paragen_run(model_dir: Path, *options: str) -> dict[str, Any]:
    """``paragen run`` in a child process importing this checkout; its --json result."""
    root = Path(paragen.__file__).resolve().parents[1]
    argv = ["run", QUESTION, "-b", f"engine:{model_dir}", "-s", "majority", "-n", "2", "--max-tokens", "12"]
    # one thread: a tiny model gains nothing from more, and OpenMP's spinning pool stalls on a loaded machine
    argv += [
        "--temperature",
        "0",
        "--backend-opt",
        "dtype=float32",
        "--backend-opt",
        "threads=1",
        *options,
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "paragen.cli", *argv], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def hf_greedy_text(model_dir: Path, messages: list[ChatMessage], **switch: Any) -> str:
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    dicts = [m.model_dump() for m in messages]
    text = str(tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=True, **switch))
    ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    out = model.generate(ids, max_new_tokens=12, do_sample=False, top_p=None, top_k=None)  # type: ignore[misc]
    decoded = str(tokenizer.decode(out[0, ids.shape[1] :]))
    return decoded


def test_paragen_run_on_a_tiny_qwen3_with_thinking_off(tiny_qwen3: Path) -> None:
    """Greedy in fp32, each sample's text is HF's for the prompt templated with thinking off, and
    the prompt counted is that rendering, empty thinking section included, once per sample."""
    result = paragen_run(tiny_qwen3, "--backend-opt", "enable_thinking=false")
    messages = solve_messages(QUESTION)
    want = hf_greedy_text(tiny_qwen3, messages, enable_thinking=False)
    assert [t["text"] for t in result["traces"]] == [want, want]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_qwen3)
    dicts = [m.model_dump() for m in messages]
    text = str(
        tokenizer.apply_chat_template(
            dicts, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
    )
    assert text.endswith(EMPTY_THINKING)
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert result["usage"]["prompt_tokens"] == 2 * len(prompt) and result["usage"]["total_tokens"] == 24
