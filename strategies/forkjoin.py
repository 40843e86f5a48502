"""``forkjoin``: run a trained fork/join reasoner (ThreadWeaver, Multiverse) with real parallel children.

Such a model writes its own forks in a grammar (``strategies/_fork_grammar.py``): ThreadWeaver's
``<Parallel>`` ``<Outlines>`` numbered ``<Outline>`` entries ``</Outlines>``, then one ``<Thread>`` per
outline, then ``</Parallel>``. Decoded as one sample the threads are written one after another;
this executor decodes them at once. The trunk is a sample with the grammar's fork marker as a stop
string; a segment that stopped there with an open outline block is a fork: one child per outline,
launched together as one fan-out on the shared prefix (the trunk's text, the marker and the child's
own header), each stopping at the child marker. Their texts are joined in outline order as the
grammar says and the trunk continues after them, for at most ``max_forks`` forks.

Every call continues a prefilled assistant reply (``capabilities.continue_final``), so a server
with prefix caching serves the shared prefix from its cache. The run's ``max_tokens`` bounds the
critical path (trunk tokens plus, per fork, the longest child), as a single sample's would bound
its length. A segment that opened an outline block with no parsable entry is written back as plain
text (its fork marker included) and the trunk goes on; a child cut off (length, error, cancelled)
is closed by the join and the parallel block closed after it, and the run ends there, as the
authors' orchestrator ends it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode, extract_answer
from paragen.reasoning import split_thinking
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._fork_grammar import GRAMMARS, ForkGrammar
from strategies._toolkit import prefixed_request, solve_request, written_text


class ForkJoinConfig(StrategyConfig):
    grammar: Literal["threadweaver", "multiverse"] = Field(
        default="threadweaver", description="the model family's fork/join markers"
    )
    max_forks: int = Field(default=32, ge=0, description="forks (and malformed fork attempts) at most")
    max_tokens: TokenCount | None = Field(
        default=None, description="critical-path token budget (None: the run's max_tokens)"
    )
    child_tokens: TokenCount | None = Field(
        default=None, description="tokens one child may write (None: what the budget has left)"
    )
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")
    extract: ExtractMode = "auto"


@dataclass(slots=True)
class _Trunk:
    """What the run has written so far and what it cost along its critical path."""

    text: str = ""
    critical_tokens: int = 0
    critical_s: float = 0.0
    attempts: int = 0  # stops at the fork marker: forks and malformed ones
    forks: int = 0
    children: int = 0
    parents: list[int] = field(default_factory=list)
    ended: bool = False


class ForkJoin(BaseStrategy[ForkJoinConfig]):
    """A fork/join reasoner's own forks run as concurrent children, joined back into its trunk."""

    name = "forkjoin"
    Config = ForkJoinConfig

    @property
    def grammar(self) -> ForkGrammar:
        return GRAMMARS[self.config.grammar]

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        ctx.require_continuation("forkjoin continues the trunk and forks children from a prefilled reply")
        trunk = _Trunk()
        budget = self.config.max_tokens or ctx.defaults.max_tokens
        while not trunk.ended and trunk.critical_tokens < budget:
            await self._step(ctx, problem, trunk, budget - trunk.critical_tokens)
        return self._finish(ctx, trunk)

    async def _step(self, ctx: RunContext, problem: Problem, trunk: _Trunk, left: int) -> None:
        """One trunk segment, then the fork it asks for, if any."""
        may_fork = trunk.attempts < self.config.max_forks
        stop = (self.grammar.fork_stop,) if may_fork else ()
        request = self._request(ctx, problem, trunk.text, left, stop)
        segment = await ctx.sample(request, label="trunk", parents=trunk.parents)
        written = written_text(segment, trunk.text, ctx.capabilities.thinking)
        trunk.text += written
        _add(trunk, [segment])
        # A stop string and the end of the sample both finish as "stop": an open outline block
        # (the server never sends the stop string itself) says it was the fork marker.
        stopped = may_fork and segment.is_ok and segment.finish_reason == "stop"
        labels = self.grammar.child_labels(written) if stopped else None
        if labels is None:
            trunk.ended = True
            return
        trunk.attempts += 1
        trunk.text += self.grammar.fork_stop
        if labels:
            await self._fork(ctx, problem, trunk, labels, segment, left - segment.completion_tokens)

    async def _fork(
        self, ctx: RunContext, problem: Problem, trunk: _Trunk, labels: list[str], parent: Trace, left: int
    ) -> None:
        """The children of one fork, all at once on the shared prefix, joined into the trunk."""
        if left <= 0:
            trunk.ended = True
            return
        cap = min(left, self.config.child_tokens or left)
        heads = [trunk.text + self.grammar.child_start(label) for label in labels]
        requests = [self._request(ctx, problem, head, cap, (self.grammar.child_stop,)) for head in heads]
        with ctx.phase("fork", fork=trunk.forks, children=len(labels)):
            async with ctx.fanout(requests, label="child", parents=[parent.id], share_prefix=True) as fan:
                async for _ in fan:
                    pass
        children = fan.traces  # in request order: outline order
        fmt = ctx.capabilities.thinking
        texts = [written_text(child, head, fmt) for child, head in zip(children, heads, strict=True)]
        trunk.ended = not all(_closed(child) for child in children)
        trunk.text += self.grammar.join(list(zip(labels, texts, strict=True)), cut_off=trunk.ended)
        _add(trunk, children)
        trunk.forks, trunk.children = trunk.forks + 1, trunk.children + len(children)
        trunk.parents = [child.id for child in children]

    def _request(
        self, ctx: RunContext, problem: Problem, so_far: str, budget: int, stop: tuple[str, ...]
    ) -> GenerateRequest:
        params: dict[str, Any] = {"max_tokens": max(1, budget), "stop": stop}
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        if not so_far:
            return solve_request(ctx, problem.question, **params)
        return prefixed_request(ctx, problem.question, so_far, **params)

    def _finish(self, ctx: RunContext, trunk: _Trunk) -> StrategyResult:
        split = split_thinking(trunk.text, ctx.capabilities.thinking)
        answer = extract_answer(split.answer, self.config.extract) if split.answer else None
        total = sum(t.completion_tokens for t in ctx.traces if t.kind == "sample")
        metrics = {
            "critical_path_tokens": float(trunk.critical_tokens),
            "critical_path_s": trunk.critical_s,
            "total_tokens": float(total),
            "forks": float(trunk.forks),
            "malformed_forks": float(trunk.attempts - trunk.forks),
            "children": float(trunk.children),
        }
        return ctx.finish(answer, text=trunk.text, reasoning=split.reasoning, metrics=metrics)


def _add(trunk: _Trunk, parallel: list[Trace]) -> None:
    """Count traces that ran side by side on the critical path: only the longest of them waits."""
    trunk.critical_tokens += max(t.completion_tokens for t in parallel)
    ends = [t.end for t in parallel if t.end is not None]
    trunk.critical_s += max(ends) - min(t.start for t in parallel) if ends else 0.0


def _closed(child: Trace) -> bool:
    """Whether a child stopped at its marker (or ended its sample) rather than being cut off."""
    return child.is_ok and child.finish_reason == "stop"
