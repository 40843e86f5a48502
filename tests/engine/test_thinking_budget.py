"""Thinking budgets enforced by the engine itself (``paragen/engine/thinking.py``).

SmolLM2 does not think by itself: a raw prompt ending in ``<think>`` makes its output a thought
(never closed, greedy), and a few-shot prompt whose answers think makes it open a thought of its
own. ``</think>`` is three tokens in its vocabulary. A tiny random Qwen3 (``<think>`` and
``</think>`` single tokens) whose chat template opens the thinking, as DeepSeek-R1's does, runs
the strategies that bound thinking.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import torch
import transformers

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.backends.base import generate
from paragen.backends.engine import EngineBackend
from paragen.engine.thinking import ThinkingBudget, ThinkingSpec
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult, Trace
from strategies.budget_forcing import BudgetForcing
from strategies.dynasor import Dynasor
from strategies.nothinking import NoThinking

pytestmark = pytest.mark.anyio

OPENED = "Question: what is 2+3? Think step by step.\n<think>"
FEW_SHOT = (
    "Q: What is 1+1?\nA: <think>One plus one makes two, so the sum is two.</think>2\n"
    "Q: What is 2+5?\nA: <think>Two plus five makes seven, so the sum is seven.</think>7\n"
    "Q: What is 3+4?\nA:"
)
PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
TinyModel = Callable[..., Path]  # the root conftest's builder
GREEDY = SamplingParams(max_tokens=24, temperature=0.0)
# A chat template that opens the thinking in the generation prompt (DeepSeek-R1's way).
OPENING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def spec(budget: int, *, opened: bool = False) -> ThinkingSpec:
    return ThinkingSpec(budget, "<think>", "</think>", (7, 8), opened)


def feed(state: ThinkingBudget, pieces: list[str]) -> list[int | None]:
    """Each piece's text appended in turn; what the state forced before each one."""
    forced: list[int | None] = []
    text = ""
    for piece in pieces:
        forced.append(state.forced())
        text += piece
        state.observe(text)
    return forced


def test_a_thought_opened_by_the_prompt_is_closed_after_its_budget() -> None:
    state = ThinkingBudget(spec(3, opened=True))
    assert feed(state, ["a", "b", "c", "</", "think>", "x"]) == [None, None, None, 7, 8, None]
    assert (state.count, state.phase) == (3, "done")


def test_a_thought_the_output_opens_counts_from_after_its_opener() -> None:
    state = ThinkingBudget(spec(2))
    assert feed(state, [" <", "think", ">", "a", "b", "</", "think>"]) == [None] * 5 + [7, 8]


def test_a_model_that_closes_within_its_budget_is_left_alone() -> None:
    state = ThinkingBudget(spec(3, opened=True))
    assert feed(state, ["a", "</thi", "nk>", "b", "c", "d"]) == [None] * 6
    assert state.phase == "done" and state.count == 2  # "a" and "</thi"


def test_output_that_does_not_open_a_thought_is_never_forced() -> None:
    state = ThinkingBudget(spec(1))
    assert feed(state, ["The", " <think>", "a", "b"]) == [None] * 4 and state.phase == "done"


def test_a_zero_budget_closes_at_once() -> None:
    assert feed(ThinkingBudget(spec(0, opened=True)), ["</", "think>", "a"]) == [7, 8, None]
    assert feed(ThinkingBudget(spec(0)), ["<think>", "</", "think>"]) == [None, 7, 8]


class _RawSample(BaseStrategy[StrategyConfig]):
    """One raw completion of the problem's question under a thinking budget, split by the run."""

    name = "raw_sample"

    def __init__(self, budget: int | None) -> None:
        super().__init__()
        self.budget = budget

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(prompt=problem.question, thinking_budget=self.budget))
        return ctx.finish(None, text=trace.text, reasoning=trace.reasoning)


@pytest.fixture
async def smol(smol_dir: Path) -> AsyncIterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(smol_dir), threads=1)
    yield backend
    await backend.aclose()


async def _budgeted(backend: EngineBackend, prompt: str, budget: int | None) -> tuple[list[int], Trace]:
    """The greedy output's token ids (``generate``, unsplit) and the run's trace of the same request."""
    request = GenerateRequest(prompt=prompt, params=GREEDY, thinking_budget=budget)
    [raw] = await generate(backend, request)
    result = await Orchestrator(backend, defaults=GREEDY).run(_RawSample(budget), Problem(question=prompt))
    assert raw.token_ids is not None
    return list(raw.token_ids), result.traces[0]


def _ids(backend: EngineBackend, text: str) -> list[int]:
    return list(backend.engine.tokenizer(text, add_special_tokens=False)["input_ids"])


def _text(backend: EngineBackend, ids: list[int]) -> str:
    """What the engine streams for ``ids`` (an end-of-sequence token writes nothing)."""
    return str(backend.engine.tokenizer.decode(ids, skip_special_tokens=True))


# asyncio only: what trio changes (cancellation, streams) its own tests cover at a fraction of this cost.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.slow
async def test_a_thought_the_prompt_opened_ends_after_exactly_its_budget(smol: EngineBackend) -> None:
    close = _ids(smol, "</think>")
    assert len(close) > 1  # several tokens in SmolLM2's vocabulary, all forced
    ids, trace = await _budgeted(smol, OPENED, 8)
    assert ids[8 : 8 + len(close)] == close
    assert (trace.thinking, trace.reasoning) == ("closed", _text(smol, ids[:8]))
    assert trace.text.strip() and trace.text == _text(smol, ids[8 + len(close) :])
    # the split's count: every token up to the end of the closing delimiter is the thinking's
    assert (trace.completion_tokens, trace.reasoning_tokens) == (len(ids), 8 + len(close))
    assert trace.answer_tokens == len(ids) - 8 - len(close) > 0

    unbudgeted_ids, unbudgeted = await _budgeted(smol, OPENED, None)
    assert unbudgeted_ids[:8] == ids[:8]  # the same greedy thought, which goes on
    assert unbudgeted.thinking == "open" and unbudgeted.reasoning_tokens == len(unbudgeted_ids) > 8


# asyncio only: what trio changes (cancellation, streams) its own tests cover at a fraction of this cost.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.slow
async def test_a_thought_the_model_opens_is_budgeted_from_after_its_opener(smol: EngineBackend) -> None:
    close, opener = _ids(smol, "</think>"), _ids(smol, " <think>")
    ids, trace = await _budgeted(smol, FEW_SHOT, 4)
    assert ids[: len(opener)] == opener  # the model opened the thought itself
    after = len(opener) + 4
    assert ids[after : after + len(close)] == close
    assert (trace.thinking, trace.reasoning) == (
        "closed",
        _text(smol, ids[len(opener) : after]),
    )
    assert trace.text.strip() and trace.reasoning_tokens == after + len(close)
    _, unbudgeted = await _budgeted(smol, FEW_SHOT, None)  # it closes its thought itself, later
    assert unbudgeted.thinking == "closed" and unbudgeted.reasoning.startswith(trace.reasoning)
    assert unbudgeted.reasoning_tokens > trace.reasoning_tokens


@pytest.fixture(scope="session")
def opening_qwen3(tiny_qwen3_with: TinyModel) -> Path:
    return tiny_qwen3_with("qwen3_opening", chat_template=OPENING_TEMPLATE)


@pytest.fixture
async def qwen3(opening_qwen3: Path) -> AsyncIterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(opening_qwen3), dtype="float32", num_blocks=64, threads=1)
    yield backend
    await backend.aclose()


async def test_every_sample_of_a_request_counts_its_own_budget(qwen3: EngineBackend) -> None:
    [close] = _ids(qwen3, "</think>")
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=3)
    request = GenerateRequest(prompt="Think: <think>\n", params=params, n=3, thinking_budget=4)
    completions = await generate(qwen3, request)
    assert len({tuple(c.token_ids or ()) for c in completions}) == 3  # three different thoughts
    for completion in completions:
        assert completion.token_ids is not None and completion.token_ids[4] == close
        assert close not in completion.token_ids[:4]


async def test_a_forced_tokens_logprob_is_the_models_own(qwen3: EngineBackend, opening_qwen3: Path) -> None:
    """The forced token's log-probability is what the model gave it (HF's, in fp32), not 0."""
    params = SamplingParams(max_tokens=3, temperature=0.0, logprobs=True)
    request = GenerateRequest(prompt="Think: <think>\n", params=params, thinking_budget=2)
    [completion] = await generate(qwen3, request)
    assert completion.token_ids is not None and completion.logprobs is not None
    model = transformers.AutoModelForCausalLM.from_pretrained(opening_qwen3, dtype=torch.float32)
    ids = torch.tensor([qwen3.prompt_ids(request) + list(completion.token_ids[:2])])
    with torch.no_grad():
        want = torch.log_softmax(model(ids).logits[0, -1], dim=-1)[completion.token_ids[2]].item()
    assert completion.token_ids[2] == _ids(qwen3, "</think>")[0]
    assert completion.logprobs[2] == pytest.approx(want, abs=1e-3) and want < -1.0  # not a likely token


async def test_budget_forcing_cap_is_one_sample_the_engine_cuts(qwen3: EngineBackend) -> None:
    orch = Orchestrator(qwen3, defaults=SamplingParams(temperature=0.0))
    result = await orch.run(BudgetForcing(think_tokens=6, answer_tokens=5), PROBLEM)
    [trace] = result.traces
    assert result.metrics["server"] == 1.0 and result.metrics["forced"] == 1.0
    # six thinking tokens after the template's opener, then the forced "</think>", then the answer
    assert (trace.thinking, trace.reasoning_tokens, trace.completion_tokens) == ("closed", 7, 11)
    assert trace.text and result.reasoning == trace.reasoning


async def test_dynasor_leaves_its_thinking_budget_to_the_engine(qwen3: EngineBackend) -> None:
    orch = Orchestrator(qwen3, defaults=SamplingParams(temperature=0.0, max_tokens=12))
    result = await orch.run(Dynasor(interval=1000, thinking_tokens=5), PROBLEM)
    [trace] = result.traces
    assert result.usage.num_probes == 0 and trace.cancel_reason is None  # no client-side cut
    assert (trace.thinking, trace.reasoning_tokens, trace.completion_tokens) == ("closed", 6, 12)


async def test_nothinking_asks_the_engine_for_a_zero_budget(qwen3: EngineBackend) -> None:
    orch = Orchestrator(qwen3, defaults=SamplingParams(temperature=0.7, max_tokens=6, seed=1))
    result = await orch.run(NoThinking(n=2), PROBLEM)
    assert result.metrics["server_budget"] == 1.0 and result.metrics["prefilled"] == 0.0
    for trace in result.traces:  # the engine closed the template's thought at once
        assert (trace.thinking, trace.reasoning, trace.reasoning_tokens) == ("closed", "", 1)
        assert trace.answer_tokens == 5
