"""AUROC of each DeepPrune judge at predicting "same final answer" from two trace prefixes.

Pairs come from SmolLM2 traces recorded once by ``benchmarks/strategy_table.py --pairs``
(``evals/data/judge_pairs.jsonl``: two texts, their answers, and whether the answers agree)
and are reused. Each text is cut to its prefix as DeepPrune would see it (first k words by
default), every judge scores every pair, and AUROC is computed with ties counted half.
The DeepPrune paper reports 0.58 for Sentence-BERT and 0.87 for its trained 4B judge, on
long reasoning traces of much larger models; these numbers are not comparable one to one.

    python -m benchmarks.judge_auroc --judges lexical,embedding [--judges llm --max-pairs 200]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from strategies.deepprune.clustering import REASONING_MARKERS, word_prefix
from strategies.deepprune.judges import load_judge

PAIRS_PATH = Path("evals/data/judge_pairs.jsonl")


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a random positive > score of a random negative), ties counting one half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def prefix(text: str, mode: str, k: int) -> str:
    """The part of a trace a judge sees: first k words, first k reasoning words, or all of it."""
    if mode == "full":
        return text
    markers = REASONING_MARKERS if mode == "reasoning_words" else None
    return word_prefix(text, k, markers) or text


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def bootstrap(
    scores: Sequence[float], labels: Sequence[bool], rounds: int = 300, seed: int = 0
) -> tuple[float, float]:
    """A 95% interval for the AUROC by resampling pairs (pairs share traces, so it is optimistic)."""
    rng = random.Random(seed)
    values = []
    for _ in range(rounds):
        pick = [rng.randrange(len(scores)) for _ in scores]
        value = auroc([scores[i] for i in pick], [labels[i] for i in pick])
        if value == value:  # skip resamples with one class only (NaN)
            values.append(value)
    values.sort()
    return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def load_pairs(path: Path, max_pairs: int | None, seed: int) -> list[dict[str, Any]]:
    """The recorded pairs; with ``max_pairs``, every same-answer pair and a random draw of the others.

    AUROC does not depend on the class ratio, so thinning the (many) negatives keeps it unbiased.
    """
    pairs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if max_pairs is None or len(pairs) <= max_pairs:
        return pairs
    same = [p for p in pairs if p["same"]]
    other = [p for p in pairs if not p["same"]]
    return same + random.Random(seed).sample(other, max(0, min(len(other), max_pairs - len(same))))


async def score(
    name: str, options: dict[str, Any], pairs: list[dict[str, Any]], mode: str, k: int
) -> list[float]:
    judge = load_judge(name, options)
    texts = [(prefix(p["a"], mode, k), prefix(p["b"], mode, k)) for p in pairs]
    if name != "llm":
        return await judge.same_answer(texts)
    from paragen import RunContext
    from paragen.backends.engine import EngineBackend
    from paragen.types import Problem

    backend = EngineBackend.from_spec(None)
    scores = [0.5] * len(pairs)
    by_problem: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        by_problem.setdefault(p["problem_id"], []).append(i)
    for indices in by_problem.values():  # one batched judge call per problem (its prompt names the problem)
        first = pairs[indices[0]]
        ctx = RunContext(backend, Problem(id=first["problem_id"], question=first["question"]))
        for i, value in zip(indices, await judge.same_answer([texts[i] for i in indices], ctx), strict=True):
            scores[i] = value
    return scores


async def main(args: argparse.Namespace) -> None:
    pairs = load_pairs(Path(args.pairs), args.max_pairs, args.seed)
    labels = [bool(p["same"]) for p in pairs]
    options = json.loads(args.options) if args.options else {}
    print(
        f"{len(pairs)} pairs, {sum(labels) / max(1, len(labels)):.2f} same-answer; "
        f"prefix={args.prefix}:{args.k}"
    )
    print("| judge | AUROC | 95% bootstrap | mean score (same) | mean score (different) |")
    print("|---|---|---|---|---|")
    for name in args.judges.split(","):
        scores = await score(name, options.get(name, {}), pairs, args.prefix, args.k)
        same = [s for s, y in zip(scores, labels, strict=True) if y]
        diff = [s for s, y in zip(scores, labels, strict=True) if not y]
        low, high = bootstrap(scores, labels)
        cells = [
            f"{auroc(scores, labels):.3f}",
            f"{low:.2f}-{high:.2f}",
            f"{mean(same):.3f}",
            f"{mean(diff):.3f}",
        ]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", default=str(PAIRS_PATH))
    parser.add_argument("--judges", default="lexical,embedding")
    parser.add_argument("--options", default="", help='JSON per judge, e.g. {"model": {"path": "/m"}}')
    parser.add_argument("--prefix", choices=["words", "reasoning_words", "full"], default="words")
    parser.add_argument("--k", type=int, default=25)
    parser.add_argument("--max-pairs", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    anyio.run(main, parser.parse_args())
