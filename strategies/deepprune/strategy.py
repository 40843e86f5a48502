"""DeepPrune's online strategy: stream N traces, cluster their prefixes, let one cluster finish.

Each trace is clustered when it reaches its truncation point (the first k reasoning words,
first k words or first k tokens); a trace that finishes earlier is clustered on its whole
text. Once every trace is placed, only the survivors run on (see ``clustering.survivors``);
the others are pruned. The answer is the majority vote over every trace that finished.
Judge work runs inside ``tool_span("judge:NAME")`` nodes (and, for the llm judge, as
``kind="judge"`` traces), so it is timed and counted apart from the samples.
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from pydantic import Field, model_validator

from paragen import BaseStrategy, Fanout, LiveSample, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.reasoning import whole_text
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import annotate, overrides, solve_request, vote_finish
from strategies.deepprune.clustering import (
    REASONING_MARKERS,
    Clusters,
    choose_cluster,
    sample_members,
    survivors,
    word_prefix,
)
from strategies.deepprune.judges import Judge, load_judge

Event = tuple[str, int, str]  # ("prefix" | "done", trace id, text)
_CHECK_EVERY = 4  # tokens between looks for a word-based truncation point


class DeepPruneConfig(StrategyConfig):
    n: int = Field(default=512, ge=1, le=4096, description="parallel traces (paper: cons@512)")
    judge: str = Field(
        default="model",
        description="judge plugin: model (the method's trained judge; needs judge_options.path), "
        "or a stand-in: llm, embedding, lexical",
    )
    judge_options: dict[str, Any] = Field(default_factory=dict)
    truncation: Literal["reasoning_words", "words", "tokens"] = "reasoning_words"
    prefix_k: int = Field(default=25, ge=1, description="truncation point (paper: 25 reasoning words)")
    markers: tuple[str, ...] = REASONING_MARKERS
    tau: float = Field(default=0.5, ge=0, le=1, description="similarity threshold to join a cluster")
    max_clusters: int = Field(default=32, ge=1, description="K")
    k1: int = Field(default=10, ge=1, description="members sampled per cluster for comparison")
    k2: int = Field(default=20, ge=1, description="traces of the largest cluster that finish")
    k3: int = Field(default=20, ge=1, description="random traces that finish when all are singletons")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = None
    seed: int = 0
    extract: ExtractMode = "auto"

    @model_validator(mode="after")
    def _judge_is_given(self) -> DeepPruneConfig:
        # DeepPrune is its trained judge: without it the strategy would silently be another method.
        if self.judge == "model" and not self.judge_options.get("path"):
            raise ValueError(
                "deepprune's judge is the trained DeepPrune judge: give judge_options={'path': "
                "'<folder or hub id of THU-KEG/DeepPrune-Judge-4B>'}, or choose a stand-in judge "
                "(judge=embedding, lexical or llm), which makes it DeepPrune with that judge"
            )
        return self


class _Run:
    """The mutable state of one DeepPrune run."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.clusters = Clusters()
        self.prefixes: dict[int, str] = {}
        self.placed: set[int] = set()
        self.dropped: set[int] = set()  # failed before they could be placed
        self.finished: list[Trace] = []
        self.decided = False
        self.pruned: list[int] = []
        self.judge_pairs = 0
        self.checked: dict[int, int] = {}  # tokens each trace had when its prefix was last looked for

    @property
    def ready(self) -> bool:
        return not self.decided and len(self.placed) + len(self.dropped) == self.n


class DeepPrune(BaseStrategy[DeepPruneConfig]):
    """Online DeepPrune: greedy clustering of trace prefixes by a judge, then prune to one cluster."""

    name = "deepprune"
    Config = DeepPruneConfig
    _judge: Judge | None = None

    @property
    def judge(self) -> Judge:
        """One judge per strategy object: a model judge loads its weights once, not once per problem."""
        if self._judge is None:
            self._judge = load_judge(self.config.judge, self.config.judge_options)
        return self._judge

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        judge = self.judge
        rng = random.Random(cfg.seed)
        state = _Run(cfg.n)
        send, recv = anyio.create_memory_object_stream[Event](math.inf)
        request = solve_request(
            ctx, problem.question, n=cfg.n, **overrides(cfg.temperature, None, cfg.max_tokens)
        )
        monitor = self._monitor(state, send)
        async with ctx.fanout(request, n=cfg.n, monitor=monitor) as fan, ctx.concurrently() as children:
            children.start(_forward, fan, send)
            async with recv:
                async for kind, trace_id, text in recv:
                    await self._handle(ctx, fan, judge, rng, state, kind, trace_id, text)
        metrics = {
            "clusters": float(len(state.clusters.groups)),
            "largest_cluster": float(max(map(len, state.clusters.groups), default=0)),
            "pruned": float(len(state.pruned)),
            "judge_pairs": float(state.judge_pairs),
        }
        return vote_finish(ctx, [t for t in state.finished if t.is_ok], metrics=metrics)

    def _monitor(self, state: _Run, send: MemoryObjectSendStream[Event]) -> Any:
        cfg = self.config

        def at_prefix(live: LiveSample) -> None:
            trace_id = live.trace.id
            if trace_id in state.prefixes or state.decided:
                return
            # Joining the text costs O(length): look every few tokens; the cut stays exact.
            words = cfg.truncation != "tokens"
            if words and live.num_tokens - state.checked.get(trace_id, 0) < _CHECK_EVERY:
                return
            state.checked[trace_id] = live.num_tokens
            if cfg.truncation == "tokens":
                text: str | None = live.text() if live.num_tokens >= cfg.prefix_k else None
            else:
                markers = cfg.markers if cfg.truncation == "reasoning_words" else None
                text = word_prefix(live.text(), cfg.prefix_k, markers)
            if text is not None:
                state.prefixes[trace_id] = text
                send.send_nowait(("prefix", trace_id, text))

        return at_prefix

    async def _handle(
        self,
        ctx: RunContext,
        fan: Fanout,
        judge: Judge,
        rng: random.Random,
        state: _Run,
        kind: str,
        trace_id: int,
        text: str,
    ) -> None:
        if kind == "done":
            trace = next(t for t in fan.traces if t.id == trace_id)
            state.finished.append(annotate(trace, self.config.extract))
            if trace.status == "error" and trace_id not in state.placed:
                state.dropped.add(trace_id)
            elif trace_id not in state.placed and not state.decided:
                # Finished before its truncation point: its whole output, thinking included, as a
                # running sample's prefix is (the judge compares reasoning traces).
                state.prefixes.setdefault(trace_id, whole_text(trace, ctx.capabilities.thinking))
                await self._place(ctx, judge, rng, state, trace_id)
        elif trace_id not in state.placed and not state.decided:
            await self._place(ctx, judge, rng, state, trace_id)
        if state.ready:
            await self._prune(ctx, fan, rng, state)

    async def _place(
        self, ctx: RunContext, judge: Judge, rng: random.Random, state: _Run, trace_id: int
    ) -> None:
        cfg = self.config
        groups = sample_members(state.clusters.groups, cfg.k1, rng)
        pairs = [(state.prefixes[trace_id], state.prefixes[m]) for g in groups for m in g]
        scores: list[float] = []
        if pairs:
            async with ctx.tool_span(f"judge:{judge.name}", pairs=len(pairs), trace=trace_id):
                scores = await judge.same_answer(pairs, ctx)
            state.judge_pairs += len(pairs)
        sims, at = [], 0
        for g in groups:
            sims.append(scores[at : at + len(g)])
            at += len(g)
        state.clusters.add(trace_id, choose_cluster(sims, cfg.tau, cfg.max_clusters))
        state.placed.add(trace_id)

    async def _prune(self, ctx: RunContext, fan: Fanout, rng: random.Random, state: _Run) -> None:
        cfg = self.config
        state.decided = True
        keep = set(survivors(state.clusters.groups, cfg.k2, cfg.k3, rng))
        for live in fan.running:
            if live.trace.id not in keep:
                state.pruned.append(live.trace.id)
                await fan.stop(live.trace.id, "deepprune: redundant", pruned=True)
        ctx.emit("deepprune: pruned", clusters=state.clusters.groups, keep=sorted(keep), pruned=state.pruned)


async def _forward(fan: Fanout, send: MemoryObjectSendStream[Event]) -> None:
    """Finished traces join the prefix events in one queue, so the strategy handles both in order."""
    async with send:
        async for trace in fan:
            send.send_nowait(("done", trace.id, ""))
