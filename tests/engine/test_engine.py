"""The synchronous engine: cache accounting, prefix sharing, seeds, stops, budgets."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest
import torch

from paragen.engine.detokenizer import Detokenizer
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.sampler import SampleBatch, inverse_cdf_draw, sample, uniform
from paragen.errors import EngineError
from paragen.types import SamplingParams

SAMPLED = SamplingParams(max_tokens=24, temperature=1.0, seed=7)


@pytest.fixture
def engine(tiny_llama: Path) -> LLMEngine:
    return LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)


def prompt(engine: LLMEngine, text: str = "Tell me a story about a dragon") -> list[int]:
    return list(engine.tokenizer(text)["input_ids"])


def run(engine: LLMEngine) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    while not engine.is_idle:
        for o in engine.step():
            out.setdefault(o.seq_id, []).append(o.token_id)
    return out


def test_prefix_sharing_equals_separate_prefills(engine: LLMEngine) -> None:
    ids = prompt(engine)
    shared = engine.generate([ids], SAMPLED, n=4)[0]
    separate = engine.generate([ids], SAMPLED, n=4, share_prefix=False)[0]
    assert shared == separate
    assert len({tuple(s) for s in shared}) > 1  # different seeds per sample
    assert engine.num_free_blocks == 64


def test_prefix_sharing_prefills_once(engine: LLMEngine) -> None:
    ids = prompt(engine)
    engine.add_request(ids, SAMPLED, n=5)
    assert len(engine.step()) == 5  # one prefill gives all five samples their first token
    running = engine.scheduler.running
    assert len(running) == 5 and all(s.num_cached_tokens == len(ids) for s in running)
    num_full = len(ids) // 4
    shared = running[0].block_table[:num_full]
    assert all(s.block_table[:num_full] == shared for s in running)
    assert all(engine.blocks.ref_counts[b] == 5 for b in shared)
    run(engine)
    assert engine.num_free_blocks == 64


def test_seeded_sample_independent_of_batch(engine: LLMEngine) -> None:
    ids = prompt(engine)
    alone = engine.generate([ids], SAMPLED)[0][0]
    other = SamplingParams(max_tokens=30, temperature=0.8, top_p=0.9, top_k=50, seed=3)
    engine.add_request(prompt(engine, "Something else entirely"), other, n=3)
    (mine,) = engine.add_request(ids, SAMPLED)
    assert run(engine)[mine] == alone


def test_abort_frees_every_block(engine: LLMEngine) -> None:
    baseline = engine.num_free_blocks
    ids = engine.add_request(prompt(engine), SamplingParams(max_tokens=200, temperature=0.7), n=3)
    waiting = engine.add_request(prompt(engine, "queued"), SamplingParams(max_tokens=5), n=2)
    for _ in range(5):
        engine.step()
    assert engine.num_free_blocks < baseline
    assert all(engine.abort(i) for i in ids + waiting)
    assert engine.num_free_blocks == baseline and engine.is_idle
    assert not engine.abort(ids[0])


def test_abort_a_waiting_parent_keeps_its_siblings(engine: LLMEngine) -> None:
    ids = engine.add_request(prompt(engine), SamplingParams(max_tokens=6, temperature=0.0), n=3)
    engine.abort(ids[0])
    out = run(engine)
    assert set(out) == set(ids[1:]) and all(len(v) == 6 for v in out.values())
    assert engine.num_free_blocks == 64


def test_max_tokens_and_length(engine: LLMEngine) -> None:
    engine.add_request(prompt(engine), SamplingParams(max_tokens=5, temperature=0.0), ignore_eos=True)
    reasons = [o.finish_reason for o in engine.step() + engine.step() + engine.step() + engine.step()]
    reasons += [o.finish_reason for o in engine.step()]
    assert reasons == [None, None, None, None, "length"]


def test_stop_string_cuts_text(engine: LLMEngine) -> None:
    ids = prompt(engine)
    full = engine.generate([ids], SamplingParams(max_tokens=30, temperature=0.0))[0][0]
    text = engine.tokenizer.decode(full, skip_special_tokens=True)
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assume_ok = stop.strip() and stop not in text[: len(text) // 2]
    if not assume_ok:
        pytest.skip("no usable stop string in this random model's output")
    engine.add_request(ids, SamplingParams(max_tokens=30, temperature=0.0, stop=(stop,)))
    outs = []
    while not engine.is_idle:
        outs += engine.step()
    got = "".join(o.text for o in outs)
    assert outs[-1].finish_reason == "stop"
    assert got == text[: text.index(stop)]


def test_request_that_can_never_fit_is_refused(tiny_llama: Path) -> None:
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=4, block_size=4)
    with pytest.raises(EngineError, match="KV blocks"):
        engine.add_request(list(range(100, 110)), SamplingParams(max_tokens=4), n=3)
    with pytest.raises(EngineError, match="at most"):
        engine.add_request(list(range(100, 120)), SamplingParams(max_tokens=4))


def test_small_budget_queues_and_preempts_without_changing_output(tiny_llama: Path) -> None:
    roomy = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=256, block_size=4)
    tight = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=14, block_size=4)
    params = SamplingParams(max_tokens=20, temperature=0.9, seed=11)
    prompts = [prompt(roomy, t) for t in ("One two three", "Four five six seven", "Eight nine")]
    expected = roomy.generate(prompts, params, n=2)
    assert tight.generate(prompts, params, n=2) == expected
    assert tight.num_free_blocks == 14


def test_logprobs(engine: LLMEngine) -> None:
    params = SamplingParams(max_tokens=3, temperature=0.0, logprobs=True, top_logprobs=5)
    engine.add_request(prompt(engine), params)
    (out,) = engine.step()
    assert out.logprob is not None and out.top_logprobs is not None and len(out.top_logprobs) == 5
    assert out.logprob == pytest.approx(out.top_logprobs[0], abs=1e-5)  # greedy picks the best


def test_sampler_filters() -> None:
    logits = torch.randn(6, 100)
    n = 6
    batch = SampleBatch(
        temperature=torch.full((n,), 1.0),
        top_p=torch.tensor([1.0, 1.0, 0.01, 0.01, 1.0, 1.0]),
        top_k=torch.tensor([1, 1, 0, 0, 0, 0]),
        seeds=torch.arange(n),
        steps=torch.zeros(n, dtype=torch.long),
        is_filtered=True,
        is_greedy_only=False,
        has_greedy=False,
        num_top_logprobs=0,
        wants_logprobs=False,
    )
    got = sample(logits, batch).token_ids
    assert got[:4] == logits.argmax(-1)[:4].tolist()  # top_k=1 and a tiny top_p leave only the best
    u = uniform(torch.arange(1000), torch.zeros(1000, dtype=torch.long))
    assert 0.45 < float(u.mean()) < 0.55 and float(u.min()) > 0 and float(u.max()) < 1


def test_two_level_draw_is_the_inverse_cdf() -> None:
    torch.manual_seed(0)
    probs = torch.rand(4, 1000) ** 4  # 1000 tokens: not a whole number of blocks
    probs[:, ::7] = 0.0  # tokens that must never be drawn
    probs[1, 300:] = 0.0  # all mass in the first blocks
    probs[2, :990] = 0.0  # all mass in the last, partial block
    probs /= probs.sum(-1, keepdim=True)
    u = torch.cat([torch.rand(2000, dtype=torch.float64), torch.tensor([1e-12, 1 - 1e-12])])
    rows = probs.repeat_interleave(len(u), 0)
    got = inverse_cdf_draw(rows, u.repeat(4).float())
    exact = torch.searchsorted(rows.double().cumsum(-1), (u.repeat(4) * rows.double().sum(-1)).unsqueeze(1))
    assert bool((rows.gather(1, got.unsqueeze(1)) > 0).all())  # never a zero-probability token
    agree = (got == exact.squeeze(1).clamp(max=999)).float().mean()
    assert agree > 0.995  # the rest are float32 rounding at a CDF step


class ByteTokenizer:
    """Decodes ids as UTF-8 bytes, so one character can span several tokens."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def feed(detok: Detokenizer, text: str) -> tuple[list[str], bool]:
    pieces, hit = [], False
    for b in text.encode():
        piece, hit = detok.add(b)
        pieces.append(piece)
        if hit:
            break
    return pieces, hit


def test_detokenizer_waits_for_whole_characters() -> None:
    pieces, _ = feed(Detokenizer(ByteTokenizer()), "añ€")
    assert pieces == ["a", "", "ñ", "", "", "€"]


def test_detokenizer_holds_back_a_possible_stop_string() -> None:
    detok = Detokenizer(ByteTokenizer(), stop=("STOP",))
    pieces, hit = feed(detok, "ab STX STOP more")
    assert hit and "".join(pieces) == "ab STX "
    detok = Detokenizer(ByteTokenizer(), stop=("STOP",))
    pieces, hit = feed(detok, "ab ST")
    assert not hit and "".join(pieces) == "ab " and detok.flush() == "ST"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_decode_steps_do_not_page_fault(tiny_llama: Path) -> None:
    # 48 rows x a 49k vocabulary: ~9 MB per logits temporary, which glibc would otherwise
    # mmap fresh (or trim away) and fault back in on every step.
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=256, block_size=16)
    engine.add_request(prompt(engine), SamplingParams(max_tokens=12, temperature=0.8, seed=1), n=48)
    for _ in range(4):  # prefill and warm-up
        engine.step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(6):
        engine.step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 6 * 200, f"{faults} page faults in 6 decode steps"
