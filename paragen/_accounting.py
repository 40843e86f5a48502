"""Token and time accounting over a run's traces: pure functions, the same for every strategy."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from paragen.types import CountSource, RunUsage, Trace

# Two traces whose end and start are this close (seconds) still count as one after the other:
# a follow-up request is often issued within microseconds of the previous one ending.
_SEQUENCE_SLACK = 1e-4


def critical_path_tokens(traces: Sequence[Trace]) -> int:
    """The largest sum of generated tokens along a chain of traces that had to run one after another.

    Trace B follows trace A when A ended before B started, or when B names A as a parent.
    Traces that overlap in time ran in parallel, so only the longest of them counts.
    """
    # A sweep in start order: a trace that ended before this one started was seen earlier, so a
    # heap of (end, chain length) pops exactly the predecessors; O(n log n) even for n in the thousands.
    timed = sorted((t for t in traces if t.kind != "tool" or t.completion_tokens), key=lambda t: t.start)
    best: dict[int, int] = {}
    ended: list[tuple[float, int]] = []
    longest_before = 0
    for trace in timed:
        while ended and ended[0][0] <= trace.start + _SEQUENCE_SLACK:
            longest_before = max(longest_before, heapq.heappop(ended)[1])
        via_parents = max((best.get(p, 0) for p in trace.parents), default=0)
        best[trace.id] = trace.completion_tokens + max(longest_before, via_parents)
        if trace.end is not None:
            heapq.heappush(ended, (trace.end, best[trace.id]))
    return max(best.values(), default=0)


def summarize(traces: Sequence[Trace], *, latency_s: float) -> RunUsage:
    """The common accounting of a run from its traces and its wall latency."""
    samples = [t for t in traces if t.kind == "sample"]
    judges = [t for t in traces if t.kind == "judge"]
    probes = [t for t in traces if t.kind == "probe"]
    scores = [t for t in traces if t.kind == "score"]
    first_tokens = [t.first_token for t in samples if t.first_token is not None]
    cached = [t.cached_prompt_tokens for t in traces if t.cached_prompt_tokens is not None]
    sources: list[CountSource] = sorted({t.count_source for t in traces if t.kind != "tool"})
    hedged = sum(t.hedged_tokens for t in samples)
    return RunUsage(
        total_tokens=sum(t.completion_tokens for t in samples) + hedged,
        prompt_tokens=sum(t.prompt_tokens for t in traces),
        cached_prompt_tokens=sum(cached) if cached else None,
        sequential_tokens=critical_path_tokens(samples),
        wasted_tokens=sum(t.completion_tokens for t in samples if t.status != "ok") + hedged,
        judge_tokens=sum(t.completion_tokens + t.prompt_tokens for t in judges),
        probe_tokens=sum(t.completion_tokens for t in probes),
        num_probes=len(probes),
        score_tokens=sum(t.completion_tokens + t.prompt_tokens for t in scores),
        num_scores=len(scores),
        num_samples=len(samples),
        num_cancelled=sum(t.status in ("cancelled", "pruned") for t in samples),
        num_errors=sum(t.status == "error" for t in samples),
        num_hedges=sum(t.hedges for t in samples),
        hedged_tokens=hedged,
        latency_s=latency_s,
        ttft_s=min(first_tokens) if first_tokens else None,
        count_sources=sources,
        reasoning_tokens=sum(t.reasoning_tokens for t in samples),
        answer_tokens=sum(t.answer_tokens for t in samples),
        num_open_thinking=sum(t.thinking == "open" for t in samples),
    )
