"""Sessions whose prompts begin alike take a live session's first blocks (PromptHeads), and compute
what they would alone; the blocks are freed once, with the last session holding them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_hogwild import Reference

from paragen.engine.hogwild import batch
from paragen.engine.hogwild.batch import SharedForward, forward_together
from paragen.engine.hogwild.session import EngineSharedSession
from paragen.engine.llm_engine import LLMEngine
from paragen.errors import EngineError
from paragen.types import SamplingParams, SharedRow

GREEDY = SamplingParams(max_tokens=64, temperature=0.0)
BLOCK = 4
INSTRUCTIONS = "You are one of several workers solving a problem together; share the work and check it. "


def prompts(engine: LLMEngine) -> tuple[list[int], list[int]]:
    """Two prompts that begin with the same instructions and then ask different questions."""

    def ids(text: str) -> list[int]:
        return list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])

    return ids(INSTRUCTIONS + "What is 17 times 23?"), ids(INSTRUCTIONS + "And what is 19 plus 44?")


def engine_and_prompts(model_dir: Path) -> tuple[LLMEngine, list[int], list[int]]:
    engine = LLMEngine(str(model_dir), dtype="float32", num_blocks=64, block_size=BLOCK)
    return (engine, *prompts(engine))


def new_session(engine: LLMEngine) -> tuple[EngineSharedSession, int]:
    """A one-worker session and its first segment, still empty."""
    session = EngineSharedSession(engine, GREEDY, num_workers=1)
    return session, session.new_segment()


def prefilled(engine: LLMEngine, ids: list[int]) -> tuple[EngineSharedSession, int]:
    session, seg = new_session(engine)
    session.logits([SharedRow(0, [seg], ids)])
    return session, seg


def first_passes(*starts: tuple[EngineSharedSession, int, list[int]]) -> list[SharedForward]:
    """Each session's first segment written in one pass together."""
    return [SharedForward(session, [SharedRow(0, [seg], ids)]) for session, seg, ids in starts]


def whole_blocks_alike(a: list[int], b: list[int]) -> int:
    same = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return same // BLOCK


def test_a_session_takes_the_blocks_a_live_session_began_with(tiny_llama: Path) -> None:
    engine, first_ids, second_ids = engine_and_prompts(tiny_llama)
    alike = whole_blocks_alike(first_ids, second_ids)
    assert alike >= 3
    first, p1 = prefilled(engine, first_ids)
    free = engine.num_free_blocks
    second, p2 = new_session(engine)
    got = second.logits([SharedRow(0, [p2], second_ids)])
    assert second.segments[p2].blocks[:alike] == first.segments[p1].blocks[:alike]
    assert second.length(p2) == len(second_ids)
    assert (first.num_reused_tokens, second.num_reused_tokens) == (0, alike * BLOCK)
    needed = engine.blocks.num_blocks_for(len(second_ids))
    assert free - engine.num_free_blocks == needed - alike  # only the rest was allocated and computed
    token = int(got.argmax())
    step = second.logits([SharedRow(0, [p2], [token])])  # a pass that reads the taken blocks
    first.close()
    second.close()
    assert engine.num_free_blocks == 64
    alone, p3 = new_session(engine)
    torch.testing.assert_close(got, alone.logits([SharedRow(0, [p3], second_ids)]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(step, alone.logits([SharedRow(0, [p3], [token])]), atol=1e-4, rtol=1e-4)
    alone.close()
    reference = Reference(tiny_llama).plain(second_ids)
    torch.testing.assert_close(got[0], reference, atol=1e-4, rtol=1e-4)


def test_the_blocks_are_offered_only_while_their_session_holds_them(tiny_llama: Path) -> None:
    engine, first_ids, second_ids = engine_and_prompts(tiny_llama)
    first, p1 = prefilled(engine, first_ids)
    first.free_segment(p1)  # its entry goes with it
    second, p2 = new_session(engine)
    second.logits([SharedRow(0, [p2], second_ids)])
    assert engine.num_free_blocks == 64 - engine.blocks.num_blocks_for(len(second_ids))
    assert not any(engine.blocks.is_shared(b) for b in second.segments[p2].blocks)
    first.close()
    second.close()
    assert engine.num_free_blocks == 64


def test_a_refused_first_pass_gives_the_taken_blocks_back(tiny_llama: Path) -> None:
    engine, first_ids, second_ids = engine_and_prompts(tiny_llama)
    first, p1 = prefilled(engine, first_ids)
    hog, _ = prefilled(engine, [1] * (engine.num_free_blocks * BLOCK - 2))  # the cache all but full
    second, p2 = new_session(engine)
    with pytest.raises(EngineError, match="KV cache is full"):
        second.logits([SharedRow(0, [p2], second_ids)])
    assert second.length(p2) == 0 and not second.segments[p2].blocks and second.num_reused_tokens == 0
    twice = [SharedRow(0, [p2], second_ids), SharedRow(0, [p2], second_ids)]  # the first takes the blocks
    with pytest.raises(EngineError, match="two rows write"):
        second.logits(twice)
    assert second.length(p2) == 0 and not second.segments[p2].blocks
    hog.close()
    got = second.logits([SharedRow(0, [p2], second_ids)])  # the segment starts over, and takes them now
    alike = whole_blocks_alike(first_ids, second_ids)
    assert second.segments[p2].blocks[:alike] == first.segments[p1].blocks[:alike]
    assert second.length(p2) == len(second_ids)
    torch.testing.assert_close(got[0], Reference(tiny_llama).plain(second_ids), atol=1e-4, rtol=1e-4)
    first.close()
    second.close()
    assert engine.num_free_blocks == 64


def test_sessions_starting_in_one_pass_share_what_the_first_writes(tiny_llama: Path) -> None:
    """An eval starts its sessions together: the second reads the blocks the first writes in that pass."""
    engine, first_ids, second_ids = engine_and_prompts(tiny_llama)
    (first, p1), (second, p2) = new_session(engine), new_session(engine)
    jobs = first_passes((first, p1, first_ids), (second, p2, second_ids))
    together = forward_together(jobs)
    alike = whole_blocks_alike(first_ids, second_ids)
    assert second.segments[p2].blocks[:alike] == first.segments[p1].blocks[:alike]
    assert engine.num_free_blocks == 64 - engine.blocks.num_blocks_for(len(first_ids)) - (
        engine.blocks.num_blocks_for(len(second_ids)) - alike
    )
    reference = Reference(tiny_llama)
    for ids, session, seg, samples in zip(
        (first_ids, second_ids), (first, second), (p1, p2), together, strict=True
    ):
        assert not isinstance(samples, EngineError) and session.length(seg) == len(ids)
        token = int(reference.plain(ids).argmax())
        assert samples[0].token_id == token
        got = session.logits([SharedRow(0, [seg], [token])])  # the next pass reads the shared blocks
        torch.testing.assert_close(got[0], reference.plain([*ids, token]), atol=1e-4, rtol=1e-4)
    first.close()
    second.close()
    assert engine.num_free_blocks == 64


def test_a_pass_that_fails_offers_and_keeps_no_first_segment(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, first_ids, second_ids = engine_and_prompts(tiny_llama)
    (first, p1), (second, p2) = new_session(engine), new_session(engine)

    def broken(*args: object) -> torch.Tensor:
        raise RuntimeError("the forward broke")

    monkeypatch.setattr(batch, "model_logits", broken)
    jobs = first_passes((first, p1, first_ids), (second, p2, second_ids))
    with pytest.raises(RuntimeError, match="the forward broke"):
        forward_together(jobs)
    assert engine.num_free_blocks == 64  # both first segments are empty again, nothing taken
    assert engine.prompt_heads.match(second_ids) == []
    monkeypatch.undo()
    got = second.logits([SharedRow(0, [p2], second_ids)])
    torch.testing.assert_close(got[0], Reference(tiny_llama).plain(second_ids), atol=1e-4, rtol=1e-4)
    first.close()
    second.close()
    assert engine.num_free_blocks == 64
