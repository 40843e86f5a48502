"""Dynasor-CoT / Certaindex (Fu et al., hao-ai-lab): stop a reasoning trace once its answer is settled.

While a sample grows, every ``interval`` tokens it is probed: its text so far, followed by a
short phrase that asks for the final answer now and opens ``\\boxed{``, is continued for at most
``probe_tokens`` tokens and the answer read from that continuation; the probe is then thrown
away and the sample goes on. Once the last ``agree`` probes gave the same answer, the sample
stops there (status "ok", ``cancel_reason`` "certain") with that answer. A probe whose text
hesitates ("wait", "hmm") gives no answer. With ``n`` > 1 every sample is probed and stops on
its own, and the answers are voted on: Dynasor composed with majority voting.

Probes go through ``ctx.probe``: traces of kind "probe", counted as ``probe_tokens`` apart from
the samples' tokens, each a continuation of its sample's prefix (see RunContext.probe).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from paragen import BaseStrategy, LiveSample, RunContext, StrategyConfig
from paragen.answers import ExtractMode, extract_answer
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, Problem, StrategyResult, Trace
from strategies.toolkit import annotate, overrides, solve_request, vote_finish

PROBE_TEXT = "\n\nLet me stop here and state the answer my reasoning supports so far.\nFinal answer: \\boxed{"


class DynasorConfig(StrategyConfig):
    n: int = Field(default=1, ge=1, le=1024, description="samples, each stopping on its own; then a vote")
    interval: int = Field(default=64, ge=1, description="probe every this many generated tokens")
    probe_tokens: int = Field(default=16, ge=1, description="tokens a probe may decode")
    agree: int = Field(default=3, ge=1, description="consecutive equal probe answers that stop a sample")
    probe_text: str = Field(default=PROBE_TEXT, description="appended to the sample's text to probe it")
    hesitation: tuple[str, ...] = Field(default=("wait", "hmm"), description="probe text refusing an answer")
    probe_temperature: float | None = Field(default=0.0, ge=0, description="None = the sample's own")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0, description="per sample; None = run default")
    extract: ExtractMode = "auto"


@dataclass
class _Watch:
    """One sample's probes: when the next fires and what they answered so far."""

    next_at: int
    answers: list[str | None] = field(default_factory=list)
    settled: str | None = None


class Dynasor(BaseStrategy[DynasorConfig]):
    """Samples probed every ``interval`` tokens; each stops once ``agree`` probes agree; a vote over them."""

    name = "dynasor"
    Config = DynasorConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        if not ctx.capabilities.continue_final:
            raise ConfigError(
                "dynasor probes a sample by continuing its text, which this backend cannot do",
                hint="use the engine, or a vLLM/SGLang server's chat endpoint (capabilities.continue_final)",
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
        seed = ctx.defaults.seed
        return [
            solve_request(ctx, problem.question, **params, **({} if seed is None else {"seed": seed + i}))
            for i in range(cfg.n)
        ]

    async def _watch(self, ctx: RunContext, live: LiveSample, watch: _Watch) -> None:
        cfg = self.config
        if live.num_tokens < watch.next_at or live.finished or watch.settled is not None:
            return
        at = live.num_tokens
        watch.next_at = at + cfg.interval
        params: dict[str, Any] = {"stop": ()}
        if cfg.probe_temperature is not None:
            params["temperature"] = cfg.probe_temperature
        probe = await ctx.probe(live, cfg.probe_text, max_tokens=cfg.probe_tokens, **params)
        answer = self.probe_answer(probe.text) if probe.is_ok else None
        probe.answer = answer
        probe.meta["at"] = at
        watch.answers.append(answer)
        ctx.emit("dynasor probe", sample=live.trace.id, at=at, answer=answer)
        last = watch.answers[-cfg.agree :]
        if answer is not None and len(last) == cfg.agree and len(set(last)) == 1:
            watch.settled = answer
            await ctx.conclude(live, "certain")

    def probe_answer(self, text: str) -> str | None:
        """The answer a probe's continuation gives, or None if it hesitates or gives none."""
        cfg = self.config
        lowered = text.lower()
        if any(word in lowered for word in cfg.hesitation):
            return None
        tail = cfg.probe_text + text
        return extract_answer(tail if "}" in text else tail + "}", cfg.extract)

    def _answered(self, trace: Trace, watch: _Watch | None) -> Trace:
        if watch is not None and watch.settled is not None and trace.cancel_reason == "certain":
            trace.answer = watch.settled
            trace.meta["probe_answers"] = watch.answers
            return trace
        return annotate(trace, self.config.extract)
