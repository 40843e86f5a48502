"""The n=8 strategy table on SmolLM2 (paragen engine, CPU): accuracy, latency, total and sequential tokens.

The same table without the eval harness: synthetic arith problems (the ``evals.tasks.arith``
generator), one orchestrator, strategies run one after another, each over all problems with
several in flight. The majority run's traces are also written as
same-answer pairs to ``evals/data/judge_pairs.jsonl`` for ``benchmarks/judge_auroc.py``.

    python -m benchmarks.strategy_table --limit 20 --n 8 --max-tokens 192
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

import anyio

from evals.tasks.arith import generate_rows
from paragen.answers import answer_key, equivalent
from paragen.orchestrator import Orchestrator
from paragen.strategy import Strategy
from paragen.types import Problem, SamplingParams, StrategyResult
from strategies.adaptive import AdaptiveConsistency
from strategies.deepprune import DeepPrune
from strategies.ffs import FFS
from strategies.majority import Majority
from strategies.nothinking import NoThinking
from strategies.pdr import PDR, SR
from strategies.single import Single

PAIRS_PATH = Path("evals/data/judge_pairs.jsonl")


class SplitChoices:
    """The engine with ``per_choice_abort`` switched off, so n samples run as n requests.

    ``--split-requests``: FFS then runs as Async-FFS on the engine, which still batches the
    requests step by step.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities.model_copy(update={"per_choice_abort": False})

    def stream(self, request: Any) -> Any:
        return self._inner.stream(request)

    async def count_tokens(self, text: str) -> tuple[int, str]:
        return await self._inner.count_tokens(text)  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        await self._inner.aclose()


def lineup(n: int) -> list[tuple[str, Strategy]]:
    same = {"temperature": None, "top_p": None}  # every strategy samples with the run's defaults
    return [
        ("single", Single()),
        (f"majority@{n}", Majority(n=n)),
        (f"ffs@{n}", FFS(n=n, **same)),
        (f"ffs-3@{n}", FFS(n=n, k=3, **same)),
        ("pdr[4,2,1]", PDR(parallelism=(4, 2, 1))),
        ("sr[1,1,1]", SR()),
        (f"deepprune@{n}", DeepPrune(n=n, judge="embedding", truncation="words", prefix_k=25, k2=3, k3=3)),
        (f"adaptive@{n}", AdaptiveConsistency(n=n)),
        (f"nothinking@{n}", NoThinking(n=n)),
    ]


def problems(limit: int, seed: int) -> list[Problem]:
    rows = generate_rows(limit, seed)
    return [
        Problem(id=r["id"], question=r["problem"], gold=r["answer"], meta={"level": r["level"]}) for r in rows
    ]


def row(name: str, results: list[StrategyResult], probs: list[Problem], wall: float) -> dict[str, Any]:
    correct = [equivalent(r.answer, p.gold or "") for r, p in zip(results, probs, strict=True)]
    count = len(results)
    return {
        "strategy": name,
        "accuracy": sum(correct) / count,
        "latency_s": sum(r.usage.latency_s for r in results) / count,
        "total_tokens": sum(r.usage.total_tokens for r in results) / count,
        "sequential_tokens": sum(r.usage.sequential_tokens for r in results) / count,
        "prompt_tokens": sum(r.usage.prompt_tokens for r in results) / count,
        "judge_s": sum(t.end - t.start for r in results for t in r.traces if t.kind == "tool" and t.end)
        / count,
        "no_answer": sum(r.answer is None for r in results) / count,
        "wall_s": wall,
    }


def judge_pairs(results: list[StrategyResult], probs: list[Problem]) -> list[dict[str, Any]]:
    """Every pair of answered traces of one problem, labelled by whether their answers agree."""
    out = []
    for result, problem in zip(results, probs, strict=True):
        traces = [t for t in result.traces if t.kind == "sample" and t.answer is not None]
        for a, b in itertools.combinations(traces, 2):
            same = answer_key(a.answer or "") == answer_key(b.answer or "")
            texts = {"a": a.text[:1200], "b": b.text[:1200], "a_answer": a.answer, "b_answer": b.answer}
            out.append({"problem_id": problem.id, "question": problem.question, **texts, "same": same})
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| strategy | accuracy | latency s | total tok | sequential tok | prompt tok | no answer |\n"
        "|---|---|---|---|---|---|---|"
    )
    lines = [
        f"| {r['strategy']} | {r['accuracy']:.2f} | {r['latency_s']:.1f} | {r['total_tokens']:.0f} | "
        f"{r['sequential_tokens']:.0f} | {r['prompt_tokens']:.0f} | {r['no_answer']:.2f} |"
        for r in rows
    ]
    return "\n".join([head, *lines])


async def main(args: argparse.Namespace) -> None:
    from paragen.backends.engine import EngineBackend

    engine = EngineBackend.from_spec(None)
    backend: Any = SplitChoices(engine) if args.split_requests else engine
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    orch = Orchestrator(backend, defaults=sampling, max_concurrent_problems=args.concurrency)
    probs = problems(args.limit, args.seed)
    rows: list[dict[str, Any]] = []
    only = set(args.only.split(",")) if args.only else None
    for name, strategy in lineup(args.n):
        if only and not any(name.startswith(o) for o in only):
            continue
        start = time.perf_counter()
        results = await orch.run_many(strategy, probs)
        rows.append(row(name, results, probs, time.perf_counter() - start))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
        if name.startswith("majority") and args.pairs:
            pairs = "".join(json.dumps(p) + "\n" for p in judge_pairs(results, probs))
            await anyio.Path(PAIRS_PATH).write_text(pairs)
        await anyio.Path(args.out).write_text(json.dumps(rows, indent=1))
    print(markdown(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=192)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--only", default="")
    parser.add_argument("--split-requests", action="store_true", help="n requests instead of one shared one")
    parser.add_argument("--pairs", action="store_true", help="write judge pairs from the majority run")
    parser.add_argument("--out", default="benchmarks/strategy_table.json")
    anyio.run(main, parser.parse_args())
