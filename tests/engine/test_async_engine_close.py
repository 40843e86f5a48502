"""Closing the async engine fails what is queued: no caller waits on a closed engine."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from paragen.engine.async_engine import AsyncEngine
from paragen.engine.llm_engine import LLMEngine
from paragen.errors import EngineError
from paragen.types import SamplingParams

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> LLMEngine:
    return LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)


async def test_a_request_submitted_just_before_close_fails(engine: LLMEngine) -> None:
    # Regression (issue 19): the step loop left on close without looking at its inbox, so a
    # request (or abort) queued after its last turn waited forever.
    prompt = list(engine.tokenizer("Tell me a story")["input_ids"])
    for _ in range(5):  # the add must land after the loop's last turn: right before aclose, as here
        runtime = AsyncEngine(engine)
        await runtime.call(lambda: None)  # the step thread runs and waits for mail
        seqs = engine.new_request(prompt, SamplingParams(max_tokens=4, seed=0))
        request = runtime.submit(prompt, seqs)
        aborted = runtime.abort([seqs[0].seq_id + 1000])
        await runtime.aclose()
        with anyio.fail_after(5):
            item = await request.receive.receive()
        assert isinstance(item, EngineError) and "closed" in str(item)
        assert aborted.is_set()
        request.close()
    with pytest.raises(EngineError, match="closed"):
        runtime.submit(prompt, engine.new_request(prompt, SamplingParams(max_tokens=4)))
