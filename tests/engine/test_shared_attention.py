"""The shared attention against a direct per-row computation, on random views of random segments.

Each row's view is a list of segments whose keys are stored rotated at their own positions; the
reference rotates every stored key by its segment's shift (the key-rotation form: the key a plain
forward over the flattened view would hold), rotates the query at its view position, and runs
causal attention over the view in float64. The passes mix everything a plan (hogwild/reads.py) has
to hold: prompts whose first slots several sessions share, segments several rows of a session read
at shifts of their own (the workers' steps, and each other's own segments: one key class, in the
first row's order), unshifted and shifted segments of one row, short ones (headers) and long ones
(steps), negative shifts, several segments with one shift (one run), the own segment shifted or
not, long or short, and rows feeding one or several tokens (the future of the own segment hidden).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
from conftest import DEVICE

from paragen.engine.attention import SMALL_BATCH
from paragen.engine.hogwild.reads import RowView, plan_reads
from paragen.engine.kernels import fused, torch_attention

HEADS, KV_HEADS, D, SLOTS, POSITIONS = 6, 2, 16, 4096, 2048
SCALE = 0.25


def tables(d: int = D) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE cos and signed-sin tables as the model builds them ([positions, d], rotate-half layout)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(POSITIONS, dtype=torch.float64).unsqueeze(1) * inv_freq
    angles = torch.cat((angles, angles), dim=-1)
    half = d // 2
    sin = torch.cat((-angles.sin()[:, :half], angles.sin()[:, half:]), dim=-1)
    return angles.cos().float(), sin.float()


def rotate(x: torch.Tensor, position: int) -> torch.Tensor:
    """x [..., d] rotated by ``position`` (float64; any integer, negative too)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angle = position * inv_freq
    cos, sin = angle.cos().repeat(2), angle.sin().repeat(2)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def fused_attention(
    rows: list[RowView], rotation_tables: tuple[torch.Tensor, torch.Tensor], *, num_heads: int
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The fused kernel's attention over the rows, as the engine's forward builds it."""
    reads, rotations = fused.hogwild_reads(plan_reads(rows), rotation_tables)
    return fused.attention(
        reads, num_heads=num_heads, num_kv_heads=KV_HEADS, scale=SCALE, rotations=rotations
    )


def random_rows(
    rng: random.Random, num_new: int, slots: list[int], sessions: int, per_session: tuple[int, int]
) -> list[RowView]:
    """Rows of ``sessions`` sessions. Most sessions' prompts begin with the same slots (the head); a
    session's rows share its prompt and read some of its steps and each other's own segments (each
    at its own shift); each row has segments of its own too."""

    def segment(long: bool) -> list[int]:
        return [slots.pop() for _ in range(rng.randint(33, 60) if long else rng.randint(1, 6))]

    rows = []
    instructions = [slots.pop() for _ in range(rng.randint(0, 40))]  # the blocks prompts begin with alike
    for _ in range(sessions):
        prompt = instructions * (rng.random() < 0.8) + [slots.pop() for _ in range(rng.randint(5, 40))]
        steps = [segment(rng.random() < 0.7) for _ in range(rng.randint(0, 3))]
        owns = [
            [slots.pop() for _ in range(rng.randint(num_new, 60))] for _ in range(rng.randint(*per_session))
        ]
        for r, own in enumerate(owns):
            segments, shifts = [prompt], [0]
            shared = steps + [other for j, other in enumerate(owns) if j != r]
            mine = [segment(rng.random() < 0.5) for _ in range(rng.randint(0, 3))]
            for seg in rng.sample(shared, rng.randint(0, len(shared))) + mine:
                segments.append(seg)
                shifts.append(rng.choice([0, rng.randint(-80, 200), shifts[-1]]))
            segments.append(own)
            shifts.append(rng.choice([0, rng.randint(-30, 150)]))
            view_length = sum(len(s) for s in segments)
            rows.append(RowView(segments, shifts, num_new, view_length - num_new))
    return rows


def reference(row: RowView, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """[T, heads * D]: the row's queries (unrotated, [T, heads, D]) over its view, in float64."""
    keys, values = [], []
    for slots, shift in zip(row.slots, row.shifts, strict=True):
        keys.append(rotate(kv[:KV_HEADS, slots].double(), shift))
        values.append(kv[KV_HEADS:, slots].double())
    k, v = torch.cat(keys, dim=1), torch.cat(values, dim=1)  # [kv_heads, L, D]
    group = q.shape[1] // KV_HEADS
    k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
    out = []
    for m in range(row.num_new):
        position = row.query_from + m
        query = rotate(q[m].double(), position)  # [HEADS, D]
        scores = torch.einsum("hd,hld->hl", query, k[:, : position + 1]) * SCALE
        out.append(torch.einsum("hl,hld->hd", scores.softmax(-1), v[:, : position + 1]).reshape(-1))
    return torch.stack(out)


@pytest.mark.parametrize("seed", [0, 32, 997])
@pytest.mark.parametrize("num_new", [1, 3])
def test_torch_matches_per_row_attention(num_new: int, seed: int) -> None:
    rng = random.Random(num_new * 1000 + seed)
    torch.manual_seed(num_new)
    check_torch(rng, num_new, torch.float32, sessions=(1, 3), per_session=(1, 3), atol=2e-5)


@pytest.mark.parametrize("seed", [0, 32])
def test_large_bf16_torch_matches_per_row_attention(seed: int) -> None:
    # past SMALL_BATCH tokens a batch computes in the model's dtype: bf16 matmuls over the gathered runs
    rng = random.Random(7 + seed)
    torch.manual_seed(7)
    check_torch(rng, 1, torch.bfloat16, sessions=(9, 9), per_session=(2, 3), atol=3e-2)  # 18-27 rows


def check_torch(
    rng: random.Random,
    num_new: int,
    dtype: torch.dtype,
    *,
    sessions: tuple[int, int],
    per_session: tuple[int, int],
    atol: float,
) -> None:
    kv = torch.randn(2 * KV_HEADS, SLOTS, D).to(dtype)
    cos, sin = tables()
    cos_sin = (cos.to(DEVICE), sin.to(DEVICE))
    kv_on = kv.to(DEVICE)
    for _ in range(20 if dtype == torch.float32 else 5):
        free = list(range(SLOTS))
        rng.shuffle(free)
        rows = random_rows(rng, num_new, free, rng.randint(*sessions), per_session)
        assert dtype == torch.float32 or len(rows) > SMALL_BATCH  # the bf16 path
        qkv = torch.randn(len(rows) * num_new, HEADS + 2 * KV_HEADS, D).to(dtype)
        attend = torch_attention.attention(
            plan_reads(rows),
            cos_sin,
            num_slots=SLOTS,
            num_heads=HEADS,
            num_kv_heads=KV_HEADS,
            head_dim=D,
            scale=SCALE,
            dtype=dtype,
        )
        got = attend(qkv.to(DEVICE), kv_on).float().cpu().view(len(rows), num_new, -1)
        for i, row in enumerate(rows):
            q = qkv[i * num_new : (i + 1) * num_new, :HEADS]
            want = reference(row, q, kv).float()
            torch.testing.assert_close(got[i], want, atol=atol, rtol=1e-4, msg=f"row {i} of {rows}")


# head_dim 64 in bf16: the AVX-512 path where the CPU has it, its own code for 3 heads a KV head
@pytest.mark.parametrize(("heads", "head_dim"), [(HEADS, D), (HEADS, 64), (2 * KV_HEADS, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_new", [1, 3, 9])  # 9: a step header's row, a class cut at MAX_CLASS
def test_fused_matches_per_row_attention(
    num_new: int, dtype: torch.dtype, heads: int, head_dim: int, kernel_build: str
) -> None:
    """The fused kernel reads the same random views (every row in one call, any mix of shifts)."""
    if DEVICE != "cpu" or not fused.enabled(torch.device("cpu"), dtype):
        pytest.skip("the fused attention runs on a CPU with a C compiler only")
    rng = random.Random(num_new * 31 + (dtype == torch.bfloat16) + head_dim)
    torch.manual_seed(num_new)
    kv = torch.randn(2 * KV_HEADS, SLOTS, head_dim).to(dtype)
    for _ in range(20):
        free = list(range(SLOTS))
        rng.shuffle(free)
        rows = random_rows(rng, num_new, free, rng.randint(1, 9), (1, 3))
        qkv = torch.randn(len(rows) * num_new, heads + 2 * KV_HEADS, head_dim).to(dtype)
        attend = fused_attention(rows, tables(head_dim), num_heads=heads)
        got = attend(qkv, kv).float().view(len(rows), num_new, -1)
        for i, row in enumerate(rows):
            want = reference(row, qkv[i * num_new : (i + 1) * num_new, :heads], kv).float()
            atol = 2e-5 if dtype == torch.float32 else 2e-2  # bf16: the output rounded to bf16
            torch.testing.assert_close(got[i], want, atol=atol, rtol=1e-4, msg=f"row {i} of {rows}")


def session_rows(
    rng: random.Random, slots: list[int], sessions: int, workers: tuple[int, int], header: float
) -> list[RowView]:
    """Rows as Hogwild! sessions make them: each worker's view holds the session's prompt, its steps
    and every worker's own segment (its own last), the others in an order and at shifts of its own;
    a worker may feed a header (3 tokens) where the others feed one."""
    rows = []
    for _ in range(sessions):
        prompt = [slots.pop() for _ in range(rng.randint(5, 300))]
        steps = [[slots.pop() for _ in range(rng.randint(1, 200))] for _ in range(rng.randint(0, 3))]
        count = rng.randint(*workers)
        num_new = [3 if rng.random() < header else 1 for _ in range(count)]
        owns = [[slots.pop() for _ in range(rng.randint(n, 60))] for n in num_new]
        for w, own in enumerate(owns):
            others = steps + owns[:w] + owns[w + 1 :]
            rng.shuffle(others)
            segments = [prompt, *others, own]
            shifts = [0] + [rng.choice([0, rng.randint(-80, 400)]) for _ in others] + [rng.randint(-30, 150)]
            view_length = sum(len(s) for s in segments)
            rows.append(RowView(segments, shifts, num_new[w], view_length - num_new[w]))
    return rows


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_session_classes_match_per_row_attention(dtype: torch.dtype, kernel_build: str) -> None:
    """A session's one-token rows read one list of keys in one order, each at its own shifts (one
    class, each key loaded once for all of them): sessions of 1-12 workers (a class past
    fused.MAX_CLASS tokens is cut in two), one session alone (its class cut into parts to keep the
    threads busy) or several, headers beside them."""
    if DEVICE != "cpu" or not fused.enabled(torch.device("cpu"), dtype):
        pytest.skip("the fused attention runs on a CPU with a C compiler only")
    rng = random.Random(5 + (dtype == torch.bfloat16))
    torch.manual_seed(5)
    kv = torch.randn(2 * KV_HEADS, SLOTS, 64).to(dtype)
    largest = 0
    for trial in range(12):
        free = list(range(SLOTS))
        rng.shuffle(free)
        sessions = 1 if trial % 3 == 0 else rng.randint(2, 4)
        rows = session_rows(rng, free, sessions, (1, 12 if trial % 4 == 1 else 4), header=0.2)
        num_new = [row.num_new for row in rows]
        qkv = torch.randn(sum(num_new), HEADS + 2 * KV_HEADS, 64).to(dtype)
        largest = max(largest, *(len(c.tokens) for c in plan_reads(rows).classes))
        attend = fused_attention(rows, tables(64), num_heads=HEADS)
        got = attend(qkv, kv).float()
        at = 0
        for i, row in enumerate(rows):
            want = reference(row, qkv[at : at + row.num_new, :HEADS], kv).float()
            atol = 2e-5 if dtype == torch.float32 else 2e-2  # bf16: products of bf16 pairs, output bf16
            torch.testing.assert_close(got[at : at + row.num_new], want, atol=atol, rtol=1e-4, msg=f"row {i}")
            at += row.num_new
    assert largest > fused.MAX_CLASS  # classes formed, and one was cut


@pytest.fixture
def triton_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Triton kernel: compiled on CUDA, in Triton's interpreter on a CPU (conftest starts it)."""
    from paragen.engine.kernels import triton_attention

    monkeypatch.setenv("PARAGEN_TRITON_ATTENTION", "interpret" if DEVICE == "cpu" else "1")
    if not triton_attention.enabled(torch.device(DEVICE), torch.float32):
        pytest.skip("Triton is not installed (a CPU also needs TRITON_INTERPRET=1 from the start)")


def check_triton(rows: list[RowView], kv: torch.Tensor, heads: int, split: int, padded: bool = False) -> None:
    """The Triton kernel over ``rows`` (a forward's rows, in order) against the float64 reference;
    ``padded``: through the reads a CUDA graph takes (hogwild/graphs.py)."""
    from paragen.engine.hogwild import graphs
    from paragen.engine.kernels import triton_attention

    dtype, head_dim = kv.dtype, kv.shape[-1]
    qkv = torch.randn(sum(row.num_new for row in rows), heads + 2 * KV_HEADS, head_dim).to(dtype)
    cos, sin = tables(head_dim)
    cos_sin = (cos.to(DEVICE), sin.to(DEVICE))
    plan = plan_reads(rows)
    reads = triton_attention.hogwild_reads(plan, cos_sin, torch.device(DEVICE))
    if padded:
        pad = graphs.padded_reads(plan)
        reads = pad.on_device(torch.frombuffer(pad.ints, dtype=torch.int32).to(DEVICE), cos_sin)
        assert (
            reads.max_class <= triton_attention.MAX_TOKENS
        )  # the kernel's tokens a class: its shared memory
        assert reads.max_count >= max(reads.key_count.tolist()) and len(reads.key_slots) >= sum(
            map(len, rows[0].slots)
        )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(triton_attention, "SPLIT_KEYS", split)
        attend = triton_attention.attention(
            reads, num_heads=heads, num_kv_heads=KV_HEADS, head_dim=head_dim, scale=SCALE
        )
        got = attend(qkv.to(DEVICE), kv.to(DEVICE)).float().cpu()
    at = 0
    for i, row in enumerate(rows):
        want = reference(row, qkv[at : at + row.num_new, :heads], kv).float()
        # bf16: the rotated queries and the probabilities rounded for the matmuls, the output rounded
        atol = 2e-5 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(got[at : at + row.num_new], want, atol=atol, rtol=1e-4, msg=f"row {i}")
        at += row.num_new


# head sizes 16, 24 (not a power of two: Qwen2's tiny test model), 64; 7 query heads a KV head (Qwen2-7B)
@pytest.mark.parametrize(("heads", "head_dim"), [(HEADS, D), (HEADS, 24), (7 * KV_HEADS, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_new", [1, 3, 9])  # 9: a class cut in two (triton_attention.MAX_TOKENS)
@pytest.mark.usefixtures("triton_kernel")
def test_triton_matches_per_row_attention(
    num_new: int, dtype: torch.dtype, heads: int, head_dim: int
) -> None:
    """The Triton kernel reads the same random views as the torch attention (every row in one call),
    in one program a class and KV head and in splits of 64 keys joined by the second kernel."""
    rng = random.Random(num_new * 31 + (dtype == torch.bfloat16) + head_dim)
    torch.manual_seed(num_new)
    kv = torch.randn(2 * KV_HEADS, SLOTS, head_dim).to(dtype)
    # The interpreter runs each program in numpy: on a CPU one trial a case, split into 64-key parts
    # (odd trials) or not by turns over the grid, so each shape and each dtype is checked both ways.
    on_cpu = [(num_new + head_dim // 8 + (dtype == torch.bfloat16)) % 2]
    for trial in on_cpu if DEVICE == "cpu" else range(20):
        free = list(range(SLOTS))
        rng.shuffle(free)
        rows = random_rows(rng, num_new, free, rng.randint(1, 4), (1, 3))
        check_triton(rows, kv, heads, 64 * (trial % 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.usefixtures("triton_kernel")
def test_triton_session_classes_match_per_row_attention(dtype: torch.dtype) -> None:
    """Sessions' one-token rows as one class each (1-12 workers: past 8 tokens a class is cut), each
    worker at shifts of its own, headers beside them, long prompts split across programs."""
    from paragen.engine.kernels import triton_attention

    rng = random.Random(11 + (dtype == torch.bfloat16))
    torch.manual_seed(11)
    kv = torch.randn(2 * KV_HEADS, SLOTS, 64).to(dtype)
    cut = 0
    for trial in range(4 if DEVICE == "cpu" else 12):
        free = list(range(SLOTS))
        rng.shuffle(free)
        sessions = 1 if trial % 3 == 0 else rng.randint(2, 3)
        rows = session_rows(rng, free, sessions, (10, 12) if trial % 3 == 1 else (1, 4), header=0.2)
        arrays = triton_attention.hogwild_arrays(plan_reads(rows))
        cut += arrays.num_classes - len(set(arrays.ints[2]))  # parts of one class share its slots
        check_triton(rows, kv, HEADS, 128 * (trial % 2))
    assert cut > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.usefixtures("triton_kernel")
def test_triton_padded_plans_match_per_row_attention(dtype: torch.dtype) -> None:
    """The reads CUDA graphs replay: keys and rotations padded to their buckets in one buffer
    (padding never read), the grid sized for the padded count."""
    rng = random.Random(17 + (dtype == torch.bfloat16))
    torch.manual_seed(17)
    kv = torch.randn(2 * KV_HEADS, SLOTS, 64).to(dtype)
    for trial in range(4 if DEVICE == "cpu" else 12):
        free = list(range(SLOTS))
        rng.shuffle(free)
        if trial % 2:
            rows = session_rows(rng, free, rng.randint(1, 3), (1, 5), header=0.2)
        else:
            rows = random_rows(rng, 1 + 2 * (trial % 4 == 2), free, rng.randint(1, 3), (1, 3))
        check_triton(rows, kv, HEADS, 64 * (trial % 3), padded=True)
