"""Hogwild! shared sessions against HF transformers: views of segments, any order, n = 1, leaks."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import rotate_half

from paragen.engine.hogwild.batch import SharedForward, forward_together
from paragen.engine.hogwild.session import EngineSharedSession
from paragen.engine.llm_engine import LLMEngine
from paragen.errors import EngineError
from paragen.types import SamplingParams, SharedRow

GREEDY = SamplingParams(max_tokens=64, temperature=0.0)
TEXTS = {
    "P": "You are one of several workers solving a problem together. Problem: what is 17 times 23?",
    "X": " Alice: I will multiply 17 by 20 first.",
    "Y": " Bob: and I take 17 times 3, which is 51.",
    "A": " Alice: 340 plus",
    "B": " Bob:",
    "C": " Carol: let me",
    "D": " Dan: so",
}


class Reference:
    """HF transformers in fp32: a plain forward, and a forward over stored K/V re-rotated to their places."""

    def __init__(self, model_dir: Path):
        self.model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.train(False)

    @torch.no_grad()
    def plain(self, ids: list[int]) -> torch.Tensor:
        logits: torch.Tensor = self.model(torch.tensor([ids])).logits[0, -1]
        return logits

    @torch.no_grad()
    def rerotated(self, session: EngineSharedSession, view: list[int], ids: list[int]) -> torch.Tensor:
        """Logits after ``ids``, the view's stored keys rotated by their offsets (key-rotation form)."""
        kv, nkv = session.engine.cache.kv, session.engine.cfg.num_kv_heads
        past = transformers.DynamicCache()
        parts = []
        offset = 0
        for seg in view:
            slots = session.slots(seg)
            shift = offset - (session.base(seg) or 0)  # the keys are stored rotated at base + j
            cos, sin = self.model.model.rotary_emb(kv, torch.tensor([[shift]]))  # a pure shift
            parts.append((slots, cos[0, 0], sin[0, 0]))
            offset += len(slots)
        for layer in range(kv.shape[0]):
            keys, values = [], []
            for slots, cos, sin in parts:
                k = kv[layer, :nkv, slots].float()
                keys.append(k * cos + rotate_half(k) * sin)  # type: ignore[no-untyped-call]
                values.append(kv[layer, nkv:, slots].float())
            past.update(torch.cat(keys, 1).unsqueeze(0), torch.cat(values, 1).unsqueeze(0), layer)
        # transformers 5.24 renamed the cache argument (the old name warns, and warnings fail the suite).
        cache_arg = (
            "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        )
        out = self.model(torch.tensor([ids]), use_cache=True, **{cache_arg: past})
        logits: torch.Tensor = out.logits[0, -1]
        return logits


def tokens(engine: LLMEngine) -> dict[str, list[int]]:
    return {k: list(engine.tokenizer(v, add_special_tokens=False)["input_ids"]) for k, v in TEXTS.items()}


def check_views(model_dir: Path, atol: float) -> None:
    """Segments written in one context and read in another, in several orders, ragged rows in one pass."""
    engine = LLMEngine(str(model_dir), dtype="float32", num_blocks=96, block_size=4)
    ref, ids = Reference(model_dir), tokens(engine)
    session = EngineSharedSession(engine, GREEDY, num_workers=4)
    seg = {name: session.new_segment() for name in "PXYABCD"}
    P, X, Y, A, B, C, D = (seg[k] for k in "PXYABCD")
    session.logits([SharedRow(0, [P], ids["P"])])
    got_x = session.logits([SharedRow(0, [P, X], ids["X"])])
    torch.testing.assert_close(got_x[0], ref.plain(ids["P"] + ids["X"]), atol=atol, rtol=0)
    session.logits([SharedRow(1, [P, X, Y], ids["Y"])])
    rows = [
        SharedRow(0, [P, X, Y, A], ids["A"]),  # every segment read in the context it was written in
        SharedRow(1, [P, Y, X, A, B], ids["B"]),  # other orders, and A's tokens from this same pass
        SharedRow(2, [P, Y, C], ids["C"]),
        SharedRow(3, [P, X, D], ids["D"]),
    ]
    got = session.logits(rows)
    want = [
        ref.plain(ids["P"] + ids["X"] + ids["Y"] + ids["A"]),
        ref.rerotated(session, [P, Y, X, A], ids["B"]),
        ref.rerotated(session, [P, Y], ids["C"]),
        ref.plain(ids["P"] + ids["X"] + ids["D"]),
    ]
    for i, expected in enumerate(want):
        torch.testing.assert_close(got[i], expected, atol=atol, rtol=0, msg=f"row {i}")
    # The key-rotation reference agrees with a plain forward where the contexts match.
    torch.testing.assert_close(ref.rerotated(session, [P, X], ids["D"]), want[3], atol=atol, rtol=0)
    assert [session.length(s) for s in (P, X, Y, A, B, C, D)] == [len(ids[k]) for k in "PXYABCD"]
    # One token per row, views of 4, 4, 2 and 3 segments: one batch whose segment positions are
    # padded to line up across rows (each rotation is scored against its own segment's slots only).
    # No view holds another row's own segment: the reference is taken before this pass writes.
    views = [[P, X, Y, A], [P, Y, X, B], [P, C], [P, X, D]]
    token = ids["Y"][:1]
    want = [ref.rerotated(session, view, token) for view in views]
    got = session.logits([SharedRow(w, view, token) for w, view in enumerate(views)])
    for i, expected in enumerate(want):
        torch.testing.assert_close(got[i], expected, atol=atol, rtol=0, msg=f"one-token row {i}")
    session.close()
    assert engine.num_free_blocks == 96


@pytest.mark.usefixtures("attention_path")
def test_views_match_hf_tiny_llama(tiny_llama: Path) -> None:  # llama3 RoPE scaling
    check_views(tiny_llama, atol=1e-4)


@pytest.mark.usefixtures("attention_path")
def test_views_match_hf_tiny_qwen2(tiny_qwen2: Path) -> None:  # biases, an unfolded softmax scale
    check_views(tiny_qwen2, atol=1e-4)


@pytest.mark.slow
def test_views_match_hf_smollm2(smol_dir: Path) -> None:
    check_views(smol_dir, atol=2e-3)


def one_worker_greedy(engine: LLMEngine, prompt: list[int], num_tokens: int) -> list[int]:
    session = EngineSharedSession(engine, GREEDY, num_workers=1)
    prompt_seg, own = session.new_segment(), session.new_segment()
    out = [session.forward([SharedRow(0, [prompt_seg], prompt)], greedy=True)[0].token_id]
    while len(out) < num_tokens:
        out.append(session.forward([SharedRow(0, [prompt_seg, own], [out[-1]])], greedy=True)[0].token_id)
    session.close()
    return out


def check_one_worker(model_dir: Path, num_tokens: int) -> None:
    engine = LLMEngine(str(model_dir), dtype="float32", num_blocks=64, block_size=4)
    prompt = list(engine.tokenizer("Once upon a time, in a small village,")["input_ids"])
    plain = engine.generate([prompt], SamplingParams(max_tokens=num_tokens, temperature=0.0))[0][0]
    assert one_worker_greedy(engine, prompt, len(plain)) == plain
    assert engine.num_free_blocks == 64


def test_one_worker_equals_plain_greedy_tiny_llama(tiny_llama: Path) -> None:
    check_one_worker(tiny_llama, 40)


def test_one_worker_equals_plain_greedy_tiny_qwen2(tiny_qwen2: Path) -> None:
    check_one_worker(tiny_qwen2, 40)


@pytest.mark.slow
def test_one_worker_equals_plain_greedy_smollm2(smol_dir: Path) -> None:
    check_one_worker(smol_dir, 48)


def test_malformed_rows_are_refused_and_change_nothing(tiny_llama: Path) -> None:
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=8, block_size=4)
    session = EngineSharedSession(engine, GREEDY, num_workers=2)
    a, b = session.new_segment(), session.new_segment()
    bad: list[tuple[list[SharedRow], str]] = [
        ([SharedRow(0, [a], [1]), SharedRow(1, [b, a], [2])], "two rows write to segment"),
        ([SharedRow(2, [a], [1])], "worker 2"),
        ([SharedRow(0, [a, a], [1])], "distinct segments"),
        ([SharedRow(0, [a], [])], "at least one token"),
        ([SharedRow(0, [a], [1] * 40)], "KV cache is full"),
        ([SharedRow(0, [99], [1])], "no segment 99"),
    ]
    for rows, message in bad:
        with pytest.raises(EngineError, match=message):
            session.forward(rows)
    assert (session.length(a), session.length(b), engine.num_free_blocks) == (0, 0, 8)
    session.close()
    with pytest.raises(EngineError, match="closed"):
        session.new_segment()


def sampled_run(engine: LLMEngine, params: SamplingParams, prompt: list[int], num: int) -> list[list[int]]:
    """Two workers over views [prompt, own]; both feed worker 0's prefill token, then their own draws."""
    session = EngineSharedSession(engine, params, num_workers=2)
    p, own = session.new_segment(), [session.new_segment(), session.new_segment()]
    first = session.forward([SharedRow(0, [p], prompt)])[0].token_id
    out = [[first], [first]]
    while len(out[1]) < num:
        samples = session.forward([SharedRow(w, [p, own[w]], [out[w][-1]]) for w in (0, 1)])
        for w, sample in enumerate(samples):
            out[w].append(sample.token_id)
    session.close()
    return out


def test_sampled_workers_draw_their_own_reproducible_streams(tiny_llama: Path) -> None:
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=5)
    prompt = list(engine.tokenizer("Tell me a story about a dragon")["input_ids"])
    plain = engine.generate([prompt], params)[0][0]
    first, again = sampled_run(engine, params, prompt, 16), sampled_run(engine, params, prompt, 16)
    assert first == again
    assert first[0] == plain  # worker 0 draws like sample 0 of a plain request with the same seed
    assert first[1][1:] != first[0][1:]  # same inputs, another stream
    assert engine.num_free_blocks == 64


def test_sessions_forwarded_together_get_what_each_gets_alone(tiny_llama: Path) -> None:
    """Merged passes (concurrent Hogwild! runs) change nothing a session sees; a bad job fails alone."""
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    sampled = SamplingParams(max_tokens=12, temperature=0.8, top_k=20, seed=3)
    cases = [(GREEDY, "Tell me a story about a dragon"), (sampled, "Once upon a time")]
    prompts = [list(engine.tokenizer(text)["input_ids"]) for _, text in cases]
    alone = [
        sampled_run(engine, params, prompt, 12) for (params, _), prompt in zip(cases, prompts, strict=True)
    ]

    sessions = [EngineSharedSession(engine, params, num_workers=2) for params, _ in cases]
    segs = [(c.new_segment(), [c.new_segment(), c.new_segment()]) for c in sessions]
    firsts = forward_together(
        [
            SharedForward(c, [SharedRow(0, [p], ids)])
            for c, (p, _), ids in zip(sessions, segs, prompts, strict=True)
        ]
    )
    outs: list[list[list[int]]] = []
    for samples in firsts:
        assert not isinstance(samples, EngineError)
        outs.append([[samples[0].token_id], [samples[0].token_id]])
    other = EngineSharedSession(engine, GREEDY, num_workers=1)  # a third session, in the same passes
    broken = other.new_segment()
    while len(outs[0][1]) < 12:
        jobs = [
            SharedForward(c, [SharedRow(w, [p, own[w]], [out[w][-1]]) for w in (0, 1)])
            for c, (p, own), out in zip(sessions, segs, outs, strict=True)
        ]
        *results, refused = forward_together([*jobs, SharedForward(other, [SharedRow(0, [broken, 99], [1])])])
        assert isinstance(refused, EngineError) and "no segment 99" in str(refused)
        for out, samples in zip(outs, results, strict=True):
            assert not isinstance(samples, EngineError)
            for w, sample in enumerate(samples):
                out[w].append(sample.token_id)
    assert outs == alone
    assert other.length(broken) == 0
    for session in [*sessions, other]:
        session.close()
    assert engine.num_free_blocks == 64


def test_two_jobs_of_one_session_run_in_order(tiny_llama: Path) -> None:
    """Two passes of one session in one batch run one after the other (two passes), as they would alone."""
    engine = LLMEngine(str(tiny_llama), dtype="float32", num_blocks=64, block_size=4)
    ids = {
        name: list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])
        for name, text in TEXTS.items()
    }

    def jobs(session: EngineSharedSession) -> list[SharedForward]:
        p, x = session.new_segment(), session.new_segment()
        return [SharedForward(session, [SharedRow(0, [p], ids["P"])], greedy=True),
                SharedForward(session, [SharedRow(0, [p, x], ids["X"])], greedy=True)]  # fmt: skip

    first, second = jobs(one := EngineSharedSession(engine, GREEDY, num_workers=1))
    expected = [one.forward(first.rows, greedy=True), one.forward(second.rows, greedy=True)]
    one.close()  # else the next session's prompt takes its blocks (PromptHeads): the same, bar rounding
    together = EngineSharedSession(engine, GREEDY, num_workers=1)
    assert forward_together(jobs(together)) == expected
    assert [together.length(s) for s in (0, 1)] == [len(ids["P"]), len(ids["X"])]
    together.close()
    assert engine.num_free_blocks == 64
