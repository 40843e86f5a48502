"""Traces as OpenTelemetry spans (an in-memory exporter): the tree's shape for ffs, pdr and
beam_search, token attributes equal to the run's accounting, a cancelled sample's span marked so."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from search_helpers import VERIFIER, run_search
from strategy_helpers import run, words
from test_search_beam import SCORES, TREE

from paragen import tracing
from paragen.backends.scripted import Script
from paragen.types import StrategyResult, Trace
from strategies.beam_search import BeamSearch
from strategies.ffs import FFS
from strategies.pdr import PDR

pytestmark = pytest.mark.anyio


class Tree:
    """The finished spans, by id, with their children."""

    def __init__(self, spans: tuple[ReadableSpan, ...]) -> None:
        self.spans = list(spans)
        [self.root] = [s for s in spans if s.parent is None]
        trace_ids = {s.context.trace_id for s in spans if s.context is not None}
        assert len(trace_ids) == 1

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        assert span.context is not None
        return [s for s in self.spans if s.parent is not None and s.parent.span_id == span.context.span_id]

    def of(self, trace: Trace) -> ReadableSpan:
        [span] = [s for s in self.spans if attr(s, "paragen.trace_id") == trace.id]
        return span


def attr(span: ReadableSpan, name: str) -> Any:
    assert span.attributes is not None
    return span.attributes.get(name)


def check_traces(tree: Tree, result: StrategyResult) -> None:
    """Every trace has one span whose attributes are its own accounting."""
    assert len([s for s in tree.spans if attr(s, "paragen.trace_id") is not None]) == len(result.traces)
    for trace in result.traces:
        span = tree.of(trace)
        assert span.name == trace.kind and attr(span, "paragen.status") == trace.status
        assert attr(span, "gen_ai.usage.output_tokens") == trace.completion_tokens
        assert attr(span, "gen_ai.usage.input_tokens") == trace.prompt_tokens
        assert attr(span, "paragen.cancel_reason") == trace.cancel_reason
    root, usage = tree.root, result.usage
    assert root.name == f"run {result.strategy}" and attr(root, "paragen.strategy") == result.strategy
    assert attr(root, "paragen.stop_reason") == result.stop_reason
    assert attr(root, "gen_ai.usage.output_tokens") == usage.total_tokens
    assert attr(root, "gen_ai.usage.input_tokens") == usage.prompt_tokens
    assert attr(root, "paragen.usage.wasted_tokens") == usage.wasted_tokens


async def test_ffs_is_a_run_of_samples_the_losers_marked_cancelled(exporter: InMemorySpanExporter) -> None:
    scripts = [Script(text=words(k, "5"), token_delay=0.005) for k in (30, 6, 20, 40)]
    result, _ = await run(FFS(n=4), scripts)
    tree = Tree(exporter.get_finished_spans())
    check_traces(tree, result)
    children = tree.children(tree.root)
    assert sorted(s.name for s in children) == ["sample"] * 4  # run > sample
    cancelled = [s for s in children if attr(s, "paragen.status") == "cancelled"]
    assert len(cancelled) == 3 == result.usage.num_cancelled
    assert {attr(s, "paragen.cancel_reason") for s in cancelled} == {"first-finish"}
    assert sum(attr(s, "gen_ai.usage.output_tokens") for s in children) == result.usage.total_tokens


async def test_pdr_is_a_run_of_rounds_of_samples(exporter: InMemorySpanExporter) -> None:
    result, _ = await run(PDR(parallelism=(3, 1), operator="shared_topk", k=1), [words(8, "5")])
    tree = Tree(exporter.get_finished_spans())
    check_traces(tree, result)
    rounds = tree.children(tree.root)
    assert [(s.name, attr(s, "paragen.round")) for s in rounds] == [("round", 0), ("round", 1)]
    assert [len(tree.children(r)) for r in rounds] == [3, 1]  # the drafts of each round, in it
    assert all(s.name == "sample" for r in rounds for s in tree.children(r))


async def test_beam_search_is_a_run_of_steps_of_samples_and_scores(exporter: InMemorySpanExporter) -> None:
    result, _, _ = await run_search(BeamSearch(n=4, m=2, verifier=VERIFIER), TREE, SCORES)
    tree = Tree(exporter.get_finished_spans())
    check_traces(tree, result)
    steps = tree.children(tree.root)
    assert [(s.name, attr(s, "paragen.depth")) for s in steps] == [("step", d) for d in range(3)]
    kinds = [sorted({c.name for c in tree.children(step)}) for step in steps]
    assert kinds == [["sample", "score"]] * 3
    assert sum(len(tree.children(s)) for s in steps) == len(result.traces)
    [cancelled] = [s for s in tree.spans if attr(s, "paragen.status") == "cancelled"]
    assert str(attr(cancelled, "paragen.cancel_reason")).startswith("early-finish")
    scores = [s for s in tree.spans if s.name == "score"]
    assert sum(
        attr(s, "gen_ai.usage.input_tokens") + attr(s, "gen_ai.usage.output_tokens") for s in scores
    ) == (result.usage.score_tokens)


OFF = """
import sys, anyio
from paragen import Orchestrator, Problem
from paragen.backends.scripted import ScriptedBackend
from strategies.ffs import FFS
anyio.run(Orchestrator(ScriptedBackend(["a \\\\boxed{1}"])).run, FFS(n=2), Problem(question="q"))
print(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "paragen._otel", "prometheus"))))
"""


def test_off_a_run_imports_neither_opentelemetry_nor_prometheus() -> None:
    assert tracing.active is None
    out = subprocess.run([sys.executable, "-c", OFF], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
