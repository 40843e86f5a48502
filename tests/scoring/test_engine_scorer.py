"""EngineScorer on the tiny reward models: the same scores as transformers, batched or not."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import hf_prm_step_scores, transformers

from paragen.errors import ConfigError
from paragen.scoring import ScoreRequest, ScorerError, Scorers, StepScores, prm_messages
from paragen.scoring.engine import EngineScorer

pytestmark = pytest.mark.anyio

TOLERANCE = 1e-5  # fp32 on both sides; the measured gap is about 1e-6
CASES = [
    ("What is 2 + 2?", ("2 + 2 = 4.",)),
    ("Tom has 3 apples and buys 4 more. How many?", ("He starts with 3.", "3 + 4 = 7.", "\\boxed{7}")),
    (
        "Compute the sum of the first five odd numbers.",
        (
            "The first five odd numbers are 1, 3, 5, 7, 9.",
            "  1 + 3 = 4.  ",
            "4 + 5 = 9.",
            "9 + 7 = 16.",
            "16 + 9 = 25.\nSo the sum is 25.",
            "This is 5^2, as expected.",
            "The answer is \\boxed{25}.",
        ),
    ),
]


def requests(count: int) -> list[ScoreRequest]:
    """Requests of different lengths (a beam's candidates), so the packed batch is ragged."""
    return [
        ScoreRequest(
            question=f"Question {i}: what is {i} * 3?", steps=tuple(f"Step {j}." for j in range(1, i % 5 + 2))
        )
        for i in range(count)
    ]


async def score_together(scorer: EngineScorer, batch: list[ScoreRequest]) -> list[StepScores]:
    """Every request scored concurrently, as a beam search does; results in request order."""
    got: dict[int, StepScores] = {}

    async def score(i: int) -> None:
        got[i] = await scorer.score(batch[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(batch)):
            tg.start_soon(score, i)
    return [got[i] for i in range(len(batch))]


async def opened(path: Path, **options: str) -> EngineScorer:
    scorer = EngineScorer(str(path), **options)
    await scorer.open()
    return scorer


def chat_text(path: Path, messages: list[dict[str, str]]) -> str:
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    text: str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    return text


def hf_orm_reward(path: Path, question: str, steps: tuple[str, ...]) -> float:
    answer = "\n\n".join(step.strip() for step in steps)  # as the LLM-as-verifier joins them
    text = chat_text(path, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.Qwen2ForSequenceClassification.from_pretrained(path, dtype=torch.float32)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        return float(model(ids).logits[0, 0])


@pytest.mark.parametrize(("question", "steps"), CASES)
async def test_prm_scores_equal_transformers(tiny_prm: Path, question: str, steps: tuple[str, ...]) -> None:
    scorer = await opened(tiny_prm)
    got = await scorer.score(ScoreRequest(question=question, steps=steps))
    want = hf_prm_step_scores(tiny_prm, chat_text(tiny_prm, prm_messages(question, steps)))
    assert scorer.kind == "prm"
    assert len(got.steps) == len(steps) == len(want)
    assert got.steps == pytest.approx(want, abs=TOLERANCE)
    assert got.count_source == "tokenizer" and got.prompt_tokens > 0 and got.completion_tokens == 0


@pytest.mark.parametrize(("question", "steps"), CASES)
async def test_orm_reward_equals_transformers(tiny_orm: Path, question: str, steps: tuple[str, ...]) -> None:
    scorer = await opened(tiny_orm)
    got = await scorer.score(ScoreRequest(question=question, steps=steps))
    assert scorer.kind == "orm"
    assert got.steps == pytest.approx([hf_orm_reward(tiny_orm, question, steps)], abs=TOLERANCE)


@pytest.mark.parametrize("model", ["tiny_prm", "tiny_orm"])
async def test_concurrent_calls_share_one_forward(model: str, request: pytest.FixtureRequest) -> None:
    scorer = await opened(request.getfixturevalue(model))
    batch = requests(16)
    alone = [await scorer.score(r) for r in batch]
    forwards = scorer.num_forwards
    together = await score_together(scorer, batch)
    assert scorer.num_forwards == forwards + 1
    for one, many in zip(alone, together, strict=True):
        assert one.prompt_tokens == many.prompt_tokens
        assert many.steps == pytest.approx(one.steps, abs=TOLERANCE)


async def test_batches_are_capped_by_max_batch_tokens(tiny_prm: Path) -> None:
    scorer = await opened(tiny_prm, max_batch_tokens="100")  # about one request per forward
    batch = requests(6)
    alone = [await scorer.score(r) for r in batch]
    forwards = scorer.num_forwards
    together = await score_together(scorer, batch)
    assert scorer.num_forwards - forwards > 1
    for one, many in zip(alone, together, strict=True):
        assert many.steps == pytest.approx(one.steps, abs=TOLERANCE)


async def test_cancelled_while_queued_returns_at_once_and_leaves_the_queue(tiny_prm: Path) -> None:
    scorer = await opened(tiny_prm)
    first = requests(1)[0]
    busy, done = anyio.Event(), anyio.Event()

    async def forward_in_flight() -> None:  # holds the forward lock, as a long forward would
        async with scorer._forward_lock:
            busy.set()
            await done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(forward_in_flight)
        await busy.wait()
        started = time.monotonic()
        with anyio.move_on_after(0.05) as scope:
            await scorer.score(first)
        assert scope.cancelled_caught and time.monotonic() - started < 1.0
        assert scorer.num_queued == 0
        done.set()
    forwards = scorer.num_forwards
    assert (await scorer.score(first)).steps
    assert scorer.num_forwards == forwards + 1  # the cancelled request was never run


async def test_a_cancelled_caller_does_not_disturb_the_batch(tiny_prm: Path) -> None:
    scorer = await opened(tiny_prm)
    batch = requests(8)
    alone = [await scorer.score(r) for r in batch]
    got: list[StepScores] = []

    async def cancelled_soon() -> None:
        with anyio.move_on_after(0.001):  # queued or mid-forward: either way the others are unharmed
            await scorer.score(ScoreRequest(question="long " * 400, steps=("a step",)))

    async def the_batch() -> None:
        got.extend(await score_together(scorer, batch))

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancelled_soon)
        tg.start_soon(the_batch)
    assert scorer.num_queued == 0
    for one, many in zip(alone, got, strict=True):
        assert many.steps == pytest.approx(one.steps, abs=TOLERANCE)


async def test_a_step_holding_the_tag_is_refused(tiny_prm: Path) -> None:
    scorer = await opened(tiny_prm)
    with pytest.raises(ScorerError, match="step tag"):
        await scorer.score(ScoreRequest(question="q", steps=("fine", "sneaky <extra_0> tag")))
    assert scorer.num_queued == 0


async def test_a_generator_checkpoint_is_not_a_scorer(smol_dir: Path) -> None:
    with pytest.raises(
        ScorerError, match=r"no score head in .*LlamaForCausalLM is not a reward model"
    ) as info:
        await opened(smol_dir)
    assert "\n" not in str(info.value)


async def test_a_reward_architecture_without_its_head_is_refused(tiny_prm: Path, tmp_path: Path) -> None:
    headless = tmp_path / "headless"
    shutil.copytree(tiny_prm, headless)
    tensors = load_file(str(headless / "model.safetensors"))
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("score.")}, str(headless / "model.safetensors")
    )
    with pytest.raises(ScorerError, match=r"no score head in .*headless"):
        await opened(headless)


async def test_the_pool_opens_it_from_a_spec(tiny_orm: Path) -> None:
    scorers = Scorers()
    scorer = await scorers.get(f"engine:{tiny_orm}?dtype=float32&max_batch_tokens=4096")
    assert scorer.kind == "orm"
    assert len((await scorer.score(ScoreRequest(question="q", steps=("a", "b")))).steps) == 1
    await scorers.aclose()
    with pytest.raises(ConfigError, match="dtype"):
        EngineScorer(str(tiny_orm), dtype="float8")
    with pytest.raises(ConfigError, match="max_batch_tokens"):
        EngineScorer(str(tiny_orm), max_batch_tokens="many")


async def test_a_missing_checkpoint_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load model"):
        await opened(tmp_path / "nothing-here")
