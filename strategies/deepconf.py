"""DeepConf, Deep Think with Confidence (Fu, Wang, Tian, Zhao; arXiv 2508.15260), offline and online.

Token confidence is the negative mean log-probability of the top-k candidates at a position
(large = the model was sure); group confidence is its mean over a sliding window; a trace's
score is its lowest group confidence (or the mean of its bottom 10% of groups, or its tail).
Offline: sample n, keep the top eta% by score, vote weighted by score. Online: warm up with
n_init traces to set the stopping threshold at their (100 - eta)th percentile, then sample
the rest with a monitor that stops any trace whose current window confidence falls below it,
and stop sampling once the weighted vote's leader holds ``consensus`` of the weight.
Needs log-probabilities (top-k alternatives where the backend has them; else the chosen token's
probability, a weaker signal: documented in docs/strategies.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from paragen import BaseStrategy, LiveSample, Monitor, RunContext, StrategyConfig
from paragen.answers import ExtractMode, answer_key
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, Problem, StrategyResult, Trace
from strategies.confidence import (
    ScoreMethod,
    confident_vote,
    group_confidences,
    keep_top,
    percentile,
    token_confidences,
    trace_confidence,
    trace_score,
)
from strategies.toolkit import annotate, overrides, solve_request, vote_finish

# -- pure parts (the confidence math itself is in strategies.confidence) -------------------------


def leader_share(answers: Sequence[str | None], weights: Sequence[float]) -> float:
    """The weighted vote's leading share (NO_ANSWER ignored); 0 when nothing voted."""
    totals: dict[str, float] = {}
    for answer, weight in zip(answers, weights, strict=True):
        if answer is not None:
            totals[answer_key(answer)] = totals.get(answer_key(answer), 0.0) + weight
    whole = sum(totals.values())
    return max(totals.values()) / whole if whole > 0 else 0.0


def confidence_monitor(threshold: float, window: int) -> Monitor:
    """Prune a running trace once its latest full window's confidence is below ``threshold``."""

    def check(live: LiveSample) -> str | None:
        if live.num_tokens < window:
            return None
        conf = token_confidences(live.logprobs[-window:], live.top_logprobs[-window:])
        if conf and sum(conf) / len(conf) < threshold:
            return "deepconf: low confidence"
        return None

    return check


# -- strategies --------------------------------------------------------------------------------


class DeepConfConfig(StrategyConfig):
    n: int = Field(default=512, ge=1, le=4096, description="traces (paper budget: 512)")
    eta: float = Field(default=10, gt=0, le=100, description="percent kept: 10 = DeepConf-low, 90 = -high")
    window: int = Field(default=2048, ge=1, description="group window in tokens")
    method: ScoreMethod = "lowest_group"
    top_k: int = Field(default=5, ge=0, le=20, description="alternatives per token for confidence")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    extract: ExtractMode = "auto"


class DeepConf(BaseStrategy[DeepConfConfig]):
    """DeepConf offline: n traces, keep the most confident eta%, confidence-weighted vote."""

    name = "deepconf"
    Config = DeepConfConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        finished = await self._sample(ctx, self._request(ctx, problem), cfg.n, None)
        scores = [self.score(t) for t in finished]
        _, kept = confident_vote([t.answer for t in finished], scores, cfg.eta)
        return vote_finish(
            ctx,
            [finished[i] for i in kept],
            weights=[scores[i] for i in kept],
            metrics={"kept": float(len(kept))},
        )

    def score(self, trace: Trace) -> float:
        value = trace_confidence(trace.logprobs, trace.top_logprobs, self.config.window, self.config.method)
        trace.meta["confidence"] = value
        return value

    def _request(self, ctx: RunContext, problem: Problem) -> GenerateRequest:
        cfg, caps = self.config, ctx.capabilities
        if not caps.logprobs:
            raise ConfigError(
                f"{self.name} needs log-probabilities", hint="use the engine or an OpenAI-compatible server"
            )
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        return solve_request(
            ctx, problem.question, logprobs=True, top_logprobs=min(cfg.top_k, caps.top_logprobs), **params
        )

    async def _sample(
        self, ctx: RunContext, request: GenerateRequest, n: int, monitor: Monitor | None
    ) -> list[Trace]:
        done: list[Trace] = []
        async with ctx.fanout(request, n=n, monitor=monitor) as fan:
            async for trace in fan:
                if trace.is_ok:
                    done.append(annotate(trace, self.config.extract))
        return done


class DeepConfOnlineConfig(DeepConfConfig):
    n_init: int = Field(default=16, ge=1, description="warm-up traces that set the threshold")
    batch: int = Field(default=32, ge=1, description="traces in flight at once after the warm-up")
    consensus: float = Field(
        default=0.95, gt=0.5, le=1.0, description="stop once the leader holds this share"
    )

    def parallel_samples(self) -> int:
        """Samples in flight at once: the warm-up, or one online batch, whichever is larger."""
        return min(self.n, max(self.n_init, self.batch))


class DeepConfOnline(DeepConf):
    """DeepConf online: warm-up sets a threshold; later traces stop early when their confidence drops."""

    name = "deepconf_online"
    Config = DeepConfOnlineConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        assert isinstance(cfg, DeepConfOnlineConfig)
        request = self._request(ctx, problem)
        voters = await self._sample(ctx, request, min(cfg.n_init, cfg.n), None)
        weights = [self.score(t) for t in voters]
        threshold = percentile(weights, 100 - cfg.eta) if weights else 0.0
        monitor = confidence_monitor(threshold, cfg.window)
        launched = min(cfg.n_init, cfg.n)
        while launched < cfg.n and leader_share([t.answer for t in voters], weights) < cfg.consensus:
            size = min(cfg.batch, cfg.n - launched)
            launched += size
            await self._online_batch(ctx, request.with_params(), size, monitor, voters, weights)
        metrics = {"threshold": threshold, "launched": float(launched)}
        return vote_finish(ctx, voters, weights=weights, metrics=metrics)

    async def _online_batch(
        self,
        ctx: RunContext,
        request: GenerateRequest,
        size: int,
        monitor: Monitor,
        voters: list[Trace],
        weights: list[float],
    ) -> None:
        cfg = self.config
        assert isinstance(cfg, DeepConfOnlineConfig)
        async with ctx.fanout(request, n=size, monitor=monitor, label="online") as fan:
            async for trace in fan:
                if not trace.is_ok:
                    continue
                voters.append(annotate(trace, cfg.extract))
                weights.append(self.score(trace))
                if leader_share([t.answer for t in voters], weights) >= cfg.consensus:
                    await fan.cancel("deepconf: consensus")
                    return


__all__ = [  # the confidence math is re-exported: it was defined here first
    "DeepConf",
    "DeepConfConfig",
    "DeepConfOnline",
    "DeepConfOnlineConfig",
    "ScoreMethod",
    "confidence_monitor",
    "confident_vote",
    "group_confidences",
    "keep_top",
    "leader_share",
    "percentile",
    "token_confidences",
    "trace_confidence",
    "trace_score",
]
