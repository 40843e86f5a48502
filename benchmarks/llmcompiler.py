"""LLMCompiler vs ReAct on a synthetic parallel-tool task with a scripted model (optionally a real planner).

The task: sum the numbers stored under 5 keys, each fetched by a tool taking 0.15-0.35 s. The
scripted model writes tokens ``token_delay`` apart after a ``first_delay`` per call, so the ideal
LLMCompiler wall time (plan lines dispatched the moment they are complete, tools in parallel, then
the joiner) is known in advance. ReAct makes one model call per tool call, one after another.

Printed: per-strategy mean latency and accuracy, the ReAct/LLMCompiler latency ratio (the paper
reports up to 3.7x), and critical-path efficiency = ideal wall / measured wall for LLMCompiler.
With ``--engine`` it also runs SmolLM2-135M (paragen's CPU engine) as planner on a few problems
and reports what it produced. The last line printed is JSON:
{"react_over_llmcompiler": ..., "critical_path_efficiency": ...}.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import anyio

from evals.tasks.game24 import grade_game24, load_game24
from evals.tasks.synthetic import SyntheticTask, default_task
from paragen import Orchestrator, Problem, StrategyResult
from paragen.strategy import Strategy
from strategies.llmcompiler import LLMCompiler, ReAct


async def synthetic(task: SyntheticTask) -> dict[str, float]:
    orch = Orchestrator(task.backend(), max_concurrent_problems=1)  # one at a time: latency, not throughput
    problems = task.problems()
    compiled = await orch.run_many(LLMCompiler(toolbox=task.toolbox()), problems)
    react = await orch.run_many(ReAct(toolbox=task.toolbox()), problems)
    ideal = statistics.mean(task.ideal_llmcompiler_s(keys) for keys in task.keys)
    out = {
        "llmcompiler_s": _mean_latency(compiled),
        "react_s": _mean_latency(react),
        "llmcompiler_acc": _accuracy(compiled, [p.gold for p in problems]),
        "react_acc": _accuracy(react, [p.gold for p in problems]),
        "ideal_s": ideal,
        "dag_critical_path_s": statistics.mean(r.metrics["dag_critical_path_s"] for r in compiled),
        "tool_time_s": statistics.mean(r.metrics["tool_time_s"] for r in compiled),
    }
    out["react_over_llmcompiler"] = out["react_s"] / out["llmcompiler_s"]
    out["critical_path_efficiency"] = ideal / out["llmcompiler_s"]
    return out


def _mean_latency(results: list[StrategyResult]) -> float:
    return statistics.mean(r.usage.latency_s for r in results)


def _accuracy(results: list[StrategyResult], golds: list[str | None]) -> float:
    return sum(r.answer == g for r, g in zip(results, golds, strict=True)) / len(results)


async def engine_run(num_problems: int) -> list[dict[str, Any]]:
    """SmolLM2-135M as planner/joiner (and as ReAct agent) on a few Game of 24 puzzles, reported as is."""
    from paragen.backends.engine import EngineBackend

    orch = Orchestrator(EngineBackend.from_spec(None), max_concurrent_problems=1)
    strategies: list[Strategy] = [
        LLMCompiler(tools=("calculator",), max_replans=2, max_plan_tokens=160, max_join_tokens=64),
        ReAct(tools=("calculator",), max_steps=4, max_step_tokens=96),
    ]
    rows = []
    for problem in load_game24(range(900, 900 + num_problems)):
        for strategy in strategies:
            result = await orch.run(strategy, problem)
            rows.append(_engine_row(strategy.name, problem, result))
    return rows


def _engine_row(name: str, problem: Problem, result: StrategyResult) -> dict[str, Any]:
    first = next((t for t in result.traces if t.kind == "sample"), None)
    return {
        "strategy": name,
        "id": problem.id,
        "answer": result.answer,
        "solved": grade_game24(problem, result.answer),
        "latency_s": round(result.usage.latency_s, 2),
        "tokens": result.usage.total_tokens,
        "tool_calls": sum(t.kind == "tool" for t in result.traces),
        "plan_errors": result.metrics.get("plan_errors"),
        "first_output": (first.text if first else "")[:120],
        "failure": None if result.answer is not None else (result.text or "")[-160:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=5, help="parallel tool calls per problem")
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument(
        "--engine", type=int, default=0, metavar="N", help="also run SmolLM2 on N Game of 24 puzzles"
    )
    args = parser.parse_args()
    task = default_task(width=args.width, problems=args.problems)
    result = anyio.run(synthetic, task)
    print(f"synthetic task: {args.problems} problems x {args.width} parallel fetches (0.15-0.35 s each)")
    print(f"  LLMCompiler  {result['llmcompiler_s']:.3f} s/problem  accuracy {result['llmcompiler_acc']:.0%}")
    print(f"  ReAct        {result['react_s']:.3f} s/problem  accuracy {result['react_acc']:.0%}")
    print(f"  speedup (ReAct / LLMCompiler) {result['react_over_llmcompiler']:.2f}x   (paper: up to 3.7x)")
    efficiency, dag, tools = (
        result["critical_path_efficiency"],
        result["dag_critical_path_s"],
        result["tool_time_s"],
    )
    print(f"  ideal {result['ideal_s']:.3f} s -> critical-path efficiency {efficiency:.3f}")
    print(f"  DAG tool critical path {dag:.3f} s of {tools:.3f} s tool time")
    if args.engine:
        for row in anyio.run(engine_run, args.engine):
            print("  engine:", json.dumps(row))
    keys = ("react_over_llmcompiler", "critical_path_efficiency")
    print(json.dumps({k: round(result[k], 4) for k in keys}))


if __name__ == "__main__":
    main()
