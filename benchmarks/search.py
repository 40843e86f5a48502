"""Beam search's overhead: wall time against the ideal critical path, on the scripted backend and scorer.

Every step sample takes GEN_S seconds and every verifier call SCORE_S seconds (anyio sleeps, no
model), so a beam search of DEPTH steps can take no less than DEPTH x (GEN_S + SCORE_S): one
generation and one score per depth, everything else concurrent. What it takes beyond that is
paragen's own overhead (requests, traces, fan-outs, scoring tasks, selection). N beams, M
expansions; the median of RUNS runs, on two scripted backends (one request per sample, and M
choices per request as the engine takes them). A "floor" row runs the same samples and scores
(DEPTH rounds of one fan-out of N, each sample scored as it ends) without any search decision:
what the core's fan-outs and ctx.score cost alone, so the table splits the overhead between the
core and the strategy. Two more figures say where the rest goes: "loop floor", the same sleeps
(DEPTH rounds of N tasks, each sleeping GEN_S then SCORE_S) on bare anyio with no paragen at all,
which is what the event loop's timer alone overshoots; and "CPU per depth", one depth of the beam
search with every latency set to zero (the best of RUNS x 4 runs), which is the core's, the
strategy's and the scripted fakes' own work that lands on the critical path. Both are fixed costs,
so the ratio depends on the latencies chosen: the run is repeated with longer ones (LONG_GEN_S,
LONG_SCORE_S) for comparison. The scripted backend hands over a step's tokens as one read of an
HTTP stream would (``coalesce``): all at once when they are due, not one event-loop trip each (which
would add about 0.4 ms a depth with n choices per request, a cost of the fake and not of paragen).
Both fakes deliver at their latency (``precise``), as a reply that wakes the loop on its socket does,
not when the event loop's timer next fires: asyncio rounds the timer's epoll timeout up to whole
milliseconds, which makes a fake on the timer sleep 0.6 ms late on average, 1.2 ms a depth that is
the fakes' and not paragen's. The same search with the fakes on the loop's timer is printed too, and so is the
loop floor of both kinds of sleep. Prints the table, then a JSON line whose
``beam_search_wall_over_ideal`` (the worse backend, at GEN_S and SCORE_S) should be at most 1.05.

    .venv/bin/python benchmarks/search.py [RUNS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from paragen._context import RunContext
from paragen._timing import sleep_until
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.orchestrator import Orchestrator
from paragen.prompts import solve_messages
from paragen.scoring import ScoreRequest, Scorers, ScriptedScorer
from paragen.strategy import Strategy, StrategyConfig
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult
from strategies.beam_search import BeamSearch

GEN_S, SCORE_S, DEPTH, N, M, RUNS = 0.050, 0.020, 6, 16, 4, 5
LONG_GEN_S, LONG_SCORE_S = 0.256, 0.064  # the second setting: closer to a served model's step
PRECISE = True  # the fakes deliver at their latency, not at the event loop's next timer tick
VERIFIER = "scripted:bench"
PROBLEM = Problem(id="bench", question="What is 6 x 7?")
BACKENDS = {
    "one request per sample": Capabilities(continue_final=True, logprobs=True),
    "n choices per request": Capabilities(continue_final=True, native_n=True, per_choice_abort=True),
}


def respond(request: GenerateRequest, index: int) -> Script:
    """Step k of a beam is written GEN_S after its request; the last depth boxes the answer."""
    reply = request.messages[-1].content if request.continue_final and request.messages else ""
    depth = reply.count("\n\n")
    text = (
        "so the answer is \\boxed{42}"
        if depth == DEPTH - 1
        else f"step {depth} idea {index} {request.request_id}"
    )
    return Script(text=text, first_delay=GEN_S)


def score(request: ScoreRequest) -> float:
    """A fixed pseudo-random score per step text, so beams are kept and dropped as in a real search."""
    return (zlib.crc32(request.steps[-1].encode()) % 1000) / 1000


class Floor:
    """DEPTH rounds of N samples, each scored as it ends, and no decision: the core's cost alone."""

    name = "floor"
    config = StrategyConfig()

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        for _ in range(DEPTH):
            request = ctx.request(messages=solve_messages(problem.question))
            async with ctx.concurrently() as children, ctx.fanout(request, n=N) as fan:
                async for trace in fan:
                    children.start(self._score, ctx, trace.text)
        return ctx.finish("42")

    async def _score(self, ctx: RunContext, text: str) -> None:
        await ctx.score((text,), verifier=VERIFIER)


async def one_run(caps: Capabilities, strategy: Strategy | None = None) -> StrategyResult:
    backend = ScriptedBackend(respond, capabilities=caps, coalesce=True, precise=PRECISE)
    scorer = ScriptedScorer(score, latency=SCORE_S, precise=PRECISE)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64), scorers=Scorers({VERIFIER: scorer}))
    search = BeamSearch(n=N, m=M, max_depth=DEPTH, verifier=VERIFIER, aggregate="last")
    return await orch.run(strategy or search, PROBLEM)


async def loop_floor(runs: int, *, precise: bool) -> float:
    """The median wall time of the search's sleeps alone on bare anyio: the event loop's own floor."""

    async def sample() -> None:
        await sleep_until(time.perf_counter() + GEN_S, precise=precise)
        await sleep_until(time.perf_counter() + SCORE_S, precise=precise)

    async def once() -> float:
        start = time.perf_counter()
        for _ in range(DEPTH):
            async with anyio.create_task_group() as tg:
                for _ in range(N):
                    tg.start_soon(sample)
        return time.perf_counter() - start

    await once()
    return statistics.median([await once() for _ in range(runs)])


@contextmanager
def settings(**values: Any) -> Iterator[None]:
    """The block runs with some of the module's settings changed (GEN_S, SCORE_S, PRECISE)."""
    saved = {name: globals()[name] for name in values}
    globals().update(values)
    try:
        yield
    finally:
        globals().update(saved)


async def cpu_per_depth(caps: Capabilities, runs: int) -> float:
    """Seconds one depth of the beam search takes with zero latencies (the best of ``runs``)."""
    with settings(GEN_S=0.0, SCORE_S=0.0):
        await one_run(caps)
        walls = []
        for _ in range(runs):
            start = time.perf_counter()
            await one_run(caps)
            walls.append(time.perf_counter() - start)
    return min(walls) / DEPTH


async def at_longer_steps(runs: int) -> float:
    """The worse backend's wall / ideal when a step takes LONG_GEN_S and a score LONG_SCORE_S."""
    with settings(GEN_S=LONG_GEN_S, SCORE_S=LONG_SCORE_S):
        walls = [(await median_wall(caps, runs))[0] for caps in BACKENDS.values()]
    return max(walls) / (DEPTH * (LONG_GEN_S + LONG_SCORE_S))


async def median_wall(
    caps: Capabilities, runs: int, strategy: Strategy | None = None
) -> tuple[float, StrategyResult]:
    await one_run(caps, strategy)  # warm-up: imports, first pydantic validations
    results = [await one_run(caps, strategy) for _ in range(runs)]
    return statistics.median(r.usage.latency_s for r in results), results[-1]


async def bench(runs: int) -> dict[str, Any]:
    ideal = DEPTH * (GEN_S + SCORE_S)
    gen_ms, score_ms = GEN_S * 1000, SCORE_S * 1000
    print(
        f"beam search: N={N}, M={M}, depth {DEPTH}; a step takes {gen_ms:.0f} ms, a score {score_ms:.0f} ms"
    )
    print(f"ideal critical path: {DEPTH} x ({gen_ms:.0f} + {score_ms:.0f}) ms = {ideal * 1000:.0f} ms")
    print(f"median of {runs} runs; 'floor': the same samples and scores without search decisions")
    head = ("backend", "wall ms", "/ ideal", "floor", "CPU/depth", "samples", "scores", "tokens")
    print(
        f"{head[0]:<24} {head[1]:>9} {head[2]:>8} {head[3]:>8} {head[4]:>10}"
        f" {head[5]:>8} {head[6]:>7} {head[7]:>7}"
    )
    ratios: dict[str, float] = {}
    floors: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for name, caps in BACKENDS.items():
        floor, _ = await median_wall(caps, runs, Floor())
        wall, last = await median_wall(caps, runs)
        assert last.answer == "42" and last.metrics["depth"] == DEPTH, last.metrics
        ratios[name], floors[name] = wall / ideal, floor / ideal
        cpus[name] = await cpu_per_depth(caps, 4 * runs)
        usage = last.usage
        print(
            f"{name:<24} {wall * 1000:>9.1f} {wall / ideal:>8.3f} {floor / ideal:>8.3f}"
            f" {cpus[name] * 1000:>7.2f} ms {usage.num_samples:>8} {usage.num_scores:>7}"
            f" {usage.total_tokens:>7}"
        )
    with settings(PRECISE=False):  # the fakes on the event loop's timer (up to 1 ms late)
        timer = max([(await median_wall(caps, runs))[0] for caps in BACKENDS.values()]) / ideal
    print(f"with the fakes sleeping on the event loop's timer instead: {timer:.3f} x ideal (worse backend)")
    bare = await loop_floor(runs, precise=True) / ideal
    bare_timer = await loop_floor(runs, precise=False) / ideal
    print(
        f"loop floor (the same sleeps on bare anyio, no paragen): {bare:.3f} x ideal,"
        f" {bare_timer:.3f} on the loop's timer"
    )
    longer = await at_longer_steps(runs)
    print(
        f"with {LONG_GEN_S * 1000:.0f} ms steps and {LONG_SCORE_S * 1000:.0f} ms scores instead"
        f" (about 64 tokens at 4 ms a token; a 7B PRM's prefill): {longer:.3f} x ideal (worse backend)"
    )
    worst = max(ratios.values())
    print(f"beam search wall / ideal (worse backend): {worst:.3f} (goal <= 1.05)")
    return {
        "beam_search_wall_over_ideal": round(worst, 4),
        "wall_over_ideal_at_longer_steps": round(longer, 4),
        "by_backend": {k: round(v, 4) for k, v in ratios.items()},
        "floor_over_ideal": {k: round(v, 4) for k, v in floors.items()},
        "on_the_loop_timer": round(timer, 4),
        "loop_floor_over_ideal": round(bare, 4),
        "loop_floor_on_the_loop_timer": round(bare_timer, 4),
        "cpu_ms_per_depth": {k: round(v * 1000, 3) for k, v in cpus.items()},
        "ideal_s": ideal,
        "n": N,
        "m": M,
        "depth": DEPTH,
        "gen_s": GEN_S,
        "score_s": SCORE_S,
        "runs": runs,
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else RUNS
    print(json.dumps(anyio.run(bench, runs)))


if __name__ == "__main__":
    main()
