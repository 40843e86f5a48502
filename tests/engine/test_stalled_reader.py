"""A stream nobody reads stops decoding: its sequence sits out the engine's steps (its cache kept)
once ``STALL_STEPS`` steps' outputs wait unread, and runs again when its reader catches up. The
witness is the engine's own sequence, not what the stream delivered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from paragen.backends.engine import EngineBackend
from paragen.engine.streams import STALL_STEPS
from paragen.types import GenerateRequest, SamplingParams

pytestmark = pytest.mark.anyio
TOKENS = 40
TinyModel = Callable[..., Path]  # the root conftest's builder


@pytest.fixture(scope="module")
def checkpoint(tiny_model: TinyModel) -> Path:
    return tiny_model("stall", "LlamaForCausalLM", num_attention_heads=4, num_key_value_heads=2)


async def test_an_unread_stream_stops_decoding_until_its_reader_catches_up(checkpoint: Path) -> None:
    backend = EngineBackend.from_spec(str(checkpoint), threads=1, kv_cache_mb=16)
    request = GenerateRequest(
        prompt="Count on:",
        params=SamplingParams(max_tokens=TOKENS, temperature=0.0, seed=0),
    )
    try:
        with anyio.fail_after(60):  # a reader that never wakes its sequence would hang here
            async with backend.stream(request) as unread, backend.stream(request) as read:
                read_texts = [delta.text async for delta in read]
                held = backend.engine.seqs[unread.handle.seq_ids[0]]
                held_tokens = held.num_completion_tokens
                unread_texts = [delta.text async for delta in unread]
    finally:
        await backend.aclose()
    # The other stream ran to its end while this one decoded only until its reader was 4 behind.
    assert len(read_texts) == TOKENS
    assert held_tokens == STALL_STEPS
    assert unread_texts == read_texts  # greedy: the held sequence went on where it stopped


async def test_stalled_sequences_that_hold_the_only_slots_give_way_to_a_waiting_request(
    checkpoint: Path,
) -> None:
    """Two unread streams fill both batch slots; a third request, read, still ends: the stalled
    ones decode as if read until they finish and free their slots, rather than hold them for good."""
    backend = EngineBackend.from_spec(str(checkpoint), threads=1, kv_cache_mb=16, max_batch=2)
    held = GenerateRequest(prompt="Hold:", params=SamplingParams(max_tokens=12, temperature=0.0, seed=0))
    read = GenerateRequest(prompt="Read:", params=SamplingParams(max_tokens=8, temperature=0.0, seed=0))
    try:
        with anyio.fail_after(60):
            async with backend.stream(held) as first, backend.stream(held) as second:
                async with backend.stream(read) as third:
                    texts = [delta.text async for delta in third]
                rest = [[d.text async for d in first], [d.text async for d in second]]
    finally:
        await backend.aclose()
    assert len(texts) == 8 and [len(r) for r in rest] == [12, 12]
