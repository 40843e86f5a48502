"""Dynasor-CoT / Certaindex (Fu et al., hao-ai-lab): stop a reasoning trace once its answer is settled.

While a sample grows, every ``interval`` tokens it is probed: its text so far, followed by a
short phrase that asks for the final answer now and opens ``\\boxed{``, is continued for at most
``probe_tokens`` tokens (sampled at T=0.6, top-p 0.95, as the reference's client loop) and the
answer read from that continuation: its text up to the first ``}`` that closes nothing (a probe
cut off mid-answer gives none). The probe is then thrown away and the sample goes on. Once the
last ``agree`` probes gave one answer (equal by math-verify: 12 and 12.0 agree), the sample stops
there (status "ok", ``cancel_reason`` "certain") with that answer. A probe whose text contains a
hesitation word (wait, hold, but, okay, no, hmm: substrings, as in the reference) gives no answer.
With ``n`` > 1 every sample is probed and stops on its own, and the answers are voted on:
Dynasor composed with majority voting. docs/faithfulness.md compares each decision with
hao-ai-lab/Dynasor's ``dynasor/cot.py``.

Probes go through ``ctx.probe``: traces of kind "probe", counted as ``probe_tokens`` apart from
the samples' tokens, each a continuation of its sample's prefix (see RunContext.probe). The
prefix is the sample's raw text, its thinking included: a reasoning model is probed mid-thought,
as the reference probes the thinking of DeepSeek-R1 distills.

``thinking_tokens`` bounds each sample's thinking: on a backend whose server enforces thinking
budgets (``capabilities.thinking_budget``) the server ends the thinking there and the sample
answers; elsewhere a sample still thinking at that many tokens is probed once more and stops
with that probe's answer (status "ok", ``cancel_reason`` "thinking budget").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from paragen import BaseStrategy, LiveSample, RunContext, StrategyConfig
from paragen.answers import ExtractMode, answer_key, equivalent
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import annotate, overrides, solve_request, vote_finish

PROBE_TEXT = "\n\nLet me stop here and state the answer my reasoning supports so far.\nFinal answer: \\boxed{"


HESITATION = ("wait", "hold", "but", "okay", "no", "hmm")
"""Words that make a probe uncertain, matched as substrings as the reference does ("no" also in "not")."""


class DynasorConfig(StrategyConfig):
    n: int = Field(default=1, ge=1, le=1024, description="samples, each stopping on its own; then a vote")
    interval: TokenCount = Field(default=64, description="probe every this many generated tokens")
    probe_tokens: TokenCount = Field(default=20, description="tokens a probe may decode (reference: 20)")
    agree: int = Field(default=3, ge=1, description="consecutive equal probe answers that stop a sample")
    probe_text: str = Field(default=PROBE_TEXT, description="appended to the sample's text to probe it")
    hesitation: tuple[str, ...] = Field(
        default=HESITATION, description="a probe containing any of these (as substrings) gives no answer"
    )
    probe_temperature: float | None = Field(
        default=0.6, ge=0, description="None = the sample's own (reference: 0.6; 0 = greedy)"
    )
    probe_top_p: float | None = Field(default=0.95, gt=0, le=1, description="None = the sample's own")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = Field(default=None, description="per sample; None = run default")
    thinking_tokens: TokenCount | None = Field(
        default=None, description="thinking budget per sample (the server's where it has one)"
    )
    extract: ExtractMode = "auto"

    @model_validator(mode="after")
    def _probe_opens_a_box(self) -> DynasorConfig:
        if not self.probe_text.endswith("{"):
            raise ValueError("probe_text must end by opening the box the answer is read from ('\\boxed{')")
        return self


def boxed_prefix(text: str) -> str | None:
    """What a probe wrote inside the box the probe text opened: its text up to the first ``}``
    that closes nothing (None when no such ``}`` came, the probe cut off mid-answer, or the box
    is empty). A later ``\\boxed{`` in the continuation is part of that text, as in the reference."""
    depth = 0
    for i, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[:i].strip() or None
            depth -= 1
    return None


def same_answer(first: str, other: str) -> bool:
    """Whether two probe answers agree: one voting key, or mathematically equal (math-verify),
    as the reference groups them by ``math_equal`` (12 and 12.0, \\frac{1}{2} and 0.5)."""
    return answer_key(first) == answer_key(other) or equivalent(other, first)


def settled(answers: Sequence[str | None], agree: int) -> str | None:
    """The answer the last ``agree`` probes all gave (each equal to the first of them), else None."""
    last = answers[-agree:]
    if len(last) < agree or any(a is None for a in last):
        return None
    first = last[0]
    assert first is not None
    return last[-1] if all(same_answer(first, a) for a in last[1:] if a is not None) else None


@dataclass
class _Watch:
    """One sample's probes: when the next fires and what they answered so far."""

    next_at: int
    answers: list[str | None] = field(default_factory=list)
    settled: str | None = None
    budget_answer: str | None = None  # the last probe's, for a sample stopped at its thinking budget
    thought_closed: bool = False  # its thinking ended: the budget no longer applies (nor is checked)


class Dynasor(BaseStrategy[DynasorConfig]):
    """Samples probed every ``interval`` tokens; each stops once ``agree`` probes agree; a vote over them."""

    name = "dynasor"
    Config = DynasorConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        ctx.require_continuation(
            "dynasor probes a sample by continuing its text, which this backend cannot do"
        )
        watches: dict[int, _Watch] = {}

        async def monitor(live: LiveSample) -> None:
            await self._watch(ctx, live, watches.setdefault(live.trace.id, _Watch(cfg.interval)))

        finished: list[Trace] = []
        async with ctx.fanout(self._requests(ctx, problem), monitor=monitor) as fan:
            async for trace in fan:
                finished.append(self._answered(trace, watches.get(trace.id)))
        probes = sum(len(w.answers) for w in watches.values())
        early = sum(w.settled is not None for w in watches.values())
        return vote_finish(ctx, finished, metrics={"probes": float(probes), "stopped_early": float(early)})

    def _requests(self, ctx: RunContext, problem: Problem) -> list[GenerateRequest]:
        """One request per sample (each probed in its own task), with distinct seeds if the run has one."""
        cfg = self.config
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        if cfg.thinking_tokens is not None and ctx.capabilities.thinking_budget:
            params["thinking_budget"] = cfg.thinking_tokens
        seed = ctx.defaults.seed
        return [
            solve_request(ctx, problem.question, **params, **({} if seed is None else {"seed": seed + i}))
            for i in range(cfg.n)
        ]

    async def _watch(self, ctx: RunContext, live: LiveSample, watch: _Watch) -> None:
        cfg = self.config
        if live.finished or watch.settled is not None:
            return
        if self._over_thinking_budget(ctx, live, watch):
            watch.budget_answer = await self._probe(ctx, live, watch)
            await ctx.conclude(live, "thinking budget")
            return
        if live.num_tokens < watch.next_at:
            return
        watch.next_at = live.num_tokens + cfg.interval
        await self._probe(ctx, live, watch)
        agreed = settled(watch.answers, cfg.agree)
        if agreed is not None:
            watch.settled = agreed
            await ctx.conclude(live, "certain")

    def _over_thinking_budget(self, ctx: RunContext, live: LiveSample, watch: _Watch) -> bool:
        """The client-side thinking budget: a sample still thinking at ``thinking_tokens`` tokens. A
        closed thought stays closed, so the whole text is split once after it, not at every delta."""
        budget = self.config.thinking_tokens
        if (
            budget is None
            or watch.thought_closed
            or ctx.capabilities.thinking_budget
            or live.num_tokens < budget
        ):
            return False
        thinking = live.snapshot().thinking
        watch.thought_closed = thinking == "closed"
        return thinking == "open"

    async def _probe(self, ctx: RunContext, live: LiveSample, watch: _Watch) -> str | None:
        """Probe the sample now; its answer (None: it hesitated or gave none) is added to ``watch``."""
        cfg = self.config
        at = live.num_tokens
        params: dict[str, Any] = {"stop": ()}
        if cfg.probe_temperature is not None:
            params["temperature"] = cfg.probe_temperature
        if cfg.probe_top_p is not None:
            params["top_p"] = cfg.probe_top_p
        probe = await ctx.probe(live, cfg.probe_text, max_tokens=cfg.probe_tokens, **params)
        answer = self.probe_answer(probe.text) if probe.is_ok else None
        probe.answer = answer
        probe.meta["at"] = at
        watch.answers.append(answer)
        ctx.emit("dynasor probe", sample=live.trace.id, at=at, answer=answer)
        return answer

    def probe_answer(self, text: str) -> str | None:
        """The answer a probe's continuation gives, or None if it hesitates or gives none."""
        lowered = text.lower()
        if any(word in lowered for word in self.config.hesitation):
            return None
        return boxed_prefix(text)

    def _answered(self, trace: Trace, watch: _Watch | None) -> Trace:
        if watch is not None and watch.settled is not None and trace.cancel_reason == "certain":
            trace.answer = watch.settled
            trace.meta["probe_answers"] = watch.answers
            return trace
        if watch is not None and trace.cancel_reason == "thinking budget":
            trace.answer = watch.budget_answer
            trace.meta["probe_answers"] = watch.answers
            return trace
        return annotate(trace, self.config.extract)
