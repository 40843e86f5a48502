"""The judge plugins: embedding (real MiniLM), model (tiny random-init models made here), llm (scripted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from strategy_helpers import PROBLEM

from paragen._context import RunContext
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.types import GenerateRequest
from strategies.deepprune.judges import load_judge
from strategies.deepprune.judges.embedding import default_model_path

PAIRS = [
    ("Add 2 and 3 to get 5.", "Adding two and three gives five."),
    ("Add 2 and 3 to get 5.", "The capital of France is Paris, a large city."),
]


@pytest.mark.anyio
async def test_embedding_judge_scores_paraphrases_above_unrelated_text() -> None:
    judge = load_judge("embedding")
    same, other = await judge.same_answer(PAIRS)
    assert 0.0 <= other < same <= 1.0
    assert same > 0.5


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(default_model_path())
    root = tmp_path_factory.mktemp("judges")
    bert = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, num_labels=2,
    )  # fmt: skip
    llama = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    paths = {"classifier": root / "cls", "yes_no": root / "lm"}
    transformers.BertForSequenceClassification(bert).save_pretrained(paths["classifier"])
    transformers.LlamaForCausalLM(llama).save_pretrained(paths["yes_no"])
    for path in paths.values():
        tokenizer.save_pretrained(path)
    return paths


@pytest.mark.anyio
@pytest.mark.parametrize("head", ["classifier", "yes_no"])
async def test_model_judge_loads_a_local_judge_and_returns_probabilities(
    tiny_models: dict[str, Path], head: str
) -> None:
    judge = load_judge("model", {"path": str(tiny_models[head]), "head": head, "batch_size": 1})
    scores = await judge.same_answer(PAIRS + PAIRS[:1])
    assert len(scores) == 3 and all(0.0 < s < 1.0 for s in scores)
    assert scores[0] == pytest.approx(scores[2], abs=1e-5)  # batching does not change a pair's score


def test_model_judge_needs_a_path() -> None:
    with pytest.raises(ConfigError):
        load_judge("model")


@pytest.mark.anyio
async def test_llm_judge_reads_yes_probability_from_judge_traces() -> None:
    def responder(request: GenerateRequest, index: int) -> Script:
        prompt = request.messages[-1].content if request.messages else ""
        return Script(text="yes" if "Paris" not in prompt else "no")

    ctx = RunContext(ScriptedBackend(responder), PROBLEM)
    scores = await load_judge("llm").same_answer(PAIRS, ctx)
    assert scores[0] == pytest.approx(0.905, abs=1e-3) and scores[1] == pytest.approx(0.095, abs=1e-3)
    judges = [t for t in ctx.traces if t.kind == "judge"]
    assert len(judges) == 2 and all(t.label == "judge" for t in judges)
    usage = ctx.finish(None).usage
    assert usage.total_tokens == 0 and usage.judge_tokens > 0  # judge tokens are counted apart


def test_auroc_of_the_judge_benchmark_counts_ties_half() -> None:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "judge_auroc.py"
    spec = importlib.util.spec_from_file_location("judge_auroc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.auroc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert module.auroc([0.5, 0.5], [True, False]) == 0.5
    assert module.auroc([0.1, 0.9], [True, False]) == 0.0
    assert module.prefix("one two three four", "words", 2) == "one two"
