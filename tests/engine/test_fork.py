"""Forks of a running sequence (Dynasor's probes): the parent's cache reused, only new tokens prefilled."""

from __future__ import annotations

from pathlib import Path

import pytest

from paragen import LiveSample, RunContext
from paragen.backends.engine import EngineBackend
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.sequence import Sequence
from paragen.types import Problem, SamplingParams, Trace

GREEDY = SamplingParams(max_tokens=40, temperature=0.0)
PROBE = SamplingParams(max_tokens=6, temperature=0.0)


@pytest.fixture
def engine(tiny_llama: Path) -> LLMEngine:
    return LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)


def _ids(engine: LLMEngine, text: str) -> list[int]:
    return list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])


def _until_done(engine: LLMEngine, seq: Sequence) -> list[int]:
    out: list[int] = []
    while not seq.is_finished:
        out += [o.token_id for o in engine.step() if o.seq_id == seq.seq_id]
    return out


def test_a_fork_prefills_only_its_new_tokens_shares_blocks_and_frees_them(engine: LLMEngine) -> None:
    prompt = _ids(engine, "Tell me a story about a dragon")
    (parent_id,) = engine.add_request(prompt, GREEDY)
    made = [o.token_id for _ in range(10) for o in engine.step()]  # one prefill, nine decodes
    parent = engine.seqs[parent_id]
    seen = prompt + made[:7]  # the client has read seven tokens; the parent went on
    probe = _ids(engine, " So the answer is")
    prefilled = engine.num_prefilled_tokens
    (fork,) = engine.new_request(seen + probe, PROBE)
    fork.fork_of = parent_id
    engine.enqueue([fork])
    assert fork.num_reused_tokens == len(seen) and fork.num_cached_tokens == len(seen)
    full, rest = divmod(len(seen), 4)
    assert fork.block_table[:full] == parent.block_table[:full]
    assert all(engine.blocks.ref_counts[b] == 2 for b in parent.block_table[:full])
    assert (fork.block_table[full] != parent.block_table[full]) == bool(rest)  # the partial block copied
    forked = _until_done(engine, fork)
    assert engine.num_prefilled_tokens - prefilled == len(probe)  # no re-prefill of the prefix
    assert fork.block_table == [] and all(engine.blocks.ref_counts[b] == 1 for b in parent.block_table)
    assert engine.abort(parent_id) and engine.num_free_blocks == 64
    (alone,) = engine.generate([seen + probe], PROBE)[0:1]
    assert forked == alone[0]  # the same tokens as a full prefill of the same text


def test_a_fork_of_a_finished_sequence_prefills_everything(engine: LLMEngine) -> None:
    prompt = _ids(engine, "Once upon a time")
    (fork,) = engine.new_request(prompt + _ids(engine, " The end"), PROBE)
    fork.fork_of = 10**9  # no such sequence (finished and gone)
    prefilled = engine.num_prefilled_tokens
    engine.enqueue([fork])
    _until_done(engine, fork)
    assert fork.num_reused_tokens == 0 and engine.num_prefilled_tokens - prefilled == fork.num_prompt_tokens
    assert engine.num_free_blocks == 64


@pytest.mark.anyio
async def test_ctx_probe_on_the_engine_forks_the_live_sample(tiny_llama: Path) -> None:
    backend = EngineBackend.from_spec(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    ctx = RunContext(backend, Problem(question="Tell me a story"), defaults=GREEDY)
    request = ctx.request(prompt="Tell me a story about a dragon")
    probes: list[Trace] = []

    async def monitor(live: LiveSample) -> str | None:
        if live.num_tokens < 5:
            return None
        probes.append(await ctx.probe(live, " So the answer is", max_tokens=4))
        return "probed"

    async with ctx.fanout(request, monitor=monitor) as fan:
        (sample,) = [t async for t in fan]
    await backend.aclose()  # the step thread stops; this thread may drive the engine now
    (probe,) = probes
    suffix = _ids(backend.engine, " So the answer is")
    prompt = backend.prompt_ids(request)
    assert probe.kind == "probe" and probe.parents == [sample.id] and probe.completion_tokens == 4
    assert probe.prompt_tokens == len(prompt) + 5 + len(suffix)
    # Only the probe text is prefilled, and the sample's newest token if the step that writes its
    # K/V had not run yet when the fork was attached (the engine runs on while the probe is set up).
    uncached = probe.prompt_tokens - (probe.cached_prompt_tokens or 0)
    assert len(suffix) <= uncached <= len(suffix) + 1
    assert backend.engine.num_prefilled_tokens == len(prompt) + uncached  # the sample's, then the probe's
    assert backend.engine.num_free_blocks == 64  # the fork and the pruned sample freed
    seen = prompt + backend.engine.tokenizer(sample.text, add_special_tokens=False)["input_ids"][:5]
    alone = backend.engine.generate([seen + suffix], SamplingParams(max_tokens=4, temperature=0.0))[0][0]
    assert probe.text == backend.engine.tokenizer.decode(alone)  # as if the whole text were prefilled
