"""DeepConf, Deep Think with Confidence (Fu, Wang, Tian, Zhao; arXiv 2508.15260), offline and online.

Token confidence is the negative mean log-probability of the top-k candidates at a position,
the sampled token's added when it is not among them (large = the model was sure); group
confidence is its mean over a sliding window; a trace's score is its lowest group confidence
(or the mean of its bottom 10% of groups, or its tail).
Offline: sample n, keep the answered traces' top eta% by score, vote weighted by score.
Online: warm up with n_init traces to set the stopping threshold at the (100 - eta)th
percentile of their lowest group confidences, then sample the rest with a monitor that stops
any trace once a window's confidence falls below it; the traces whose lowest group confidence
reaches the threshold vote (warm-up included), and sampling stops once the weighted vote's
leader holds ``consensus`` of the weight. docs/faithfulness.md compares each decision with the
authors' code (facebookresearch/deepconf).
Needs log-probabilities (top-k alternatives where the backend has them; else the chosen token's
probability, a weaker signal: documented in docs/strategies.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import Field

from paragen import BaseStrategy, LiveSample, Monitor, RunContext, StrategyConfig
from paragen.answers import ExtractMode, answer_key
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._confidence import (
    ScoreMethod,
    confident_vote,
    group_confidences,
    keep_top,
    percentile,
    token_confidences,
    trace_confidence,
    trace_score,
)
from strategies._toolkit import annotate, overrides, solve_request, vote_finish

# -- pure parts (the confidence math itself is in strategies._confidence) -------------------------


def leader_share(answers: Sequence[str | None], weights: Sequence[float]) -> float:
    """The weighted vote's leading share (NO_ANSWER ignored); 0 when nothing voted."""
    totals: dict[str, float] = {}
    for answer, weight in zip(answers, weights, strict=True):
        if answer is not None:
            totals[answer_key(answer)] = totals.get(answer_key(answer), 0.0) + weight
    whole = sum(totals.values())
    return max(totals.values()) / whole if whole > 0 else 0.0


def confidence_monitor(threshold: float, window: int) -> Monitor:
    """Prune a running trace once any full window of its tokens has a mean confidence below
    ``threshold``.

    As the reference's logits processor (deepconf ``ConfPerReqLogitsProcessor``) does, every
    window is judged, also those that ended inside a delta of several tokens: the monitor
    remembers how far each trace was checked.
    """
    checked: dict[int, int] = {}

    def check(live: LiveSample) -> str | None:
        if live.num_tokens < window:
            return None
        start = max(checked.get(live.trace.id, window - 1), window - 1)  # windows ending past this
        checked[live.trace.id] = live.num_tokens
        tail = slice(start + 1 - window, live.num_tokens)
        # the top k alone: the reference's processor reads them from the logits, not the sampled token
        conf = token_confidences(live.logprobs[tail], live.top_logprobs[tail], with_sampled=False)
        if conf and min(group_confidences(conf, window)) < threshold:
            return "deepconf: low confidence"
        return None

    return check


# -- strategies --------------------------------------------------------------------------------


class DeepConfConfig(StrategyConfig):
    n: int = Field(default=512, ge=1, le=4096, description="traces (paper budget: 512)")
    eta: float = Field(default=10, gt=0, le=100, description="percent kept: 10 = DeepConf-low, 90 = -high")
    window: TokenCount = Field(default=2048, description="group window in tokens")
    method: ScoreMethod = "lowest_group"
    top_k: int = Field(
        default=20, ge=0, le=20, description="alternatives per token for confidence (reference: 20)"
    )
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = None
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
    consensus: float | None = Field(
        default=0.95,
        gt=0.5,
        le=1.0,
        description="stop once the leader holds this share (the paper's tau); None = sample all n, "
        "as the reference code does",
    )

    def parallel_samples(self) -> int:
        """Samples in flight at once: the warm-up, or one online batch, whichever is larger."""
        return min(self.n, max(self.n_init, self.batch))


class DeepConfOnline(DeepConf):
    """DeepConf online: warm-up sets a threshold; later traces stop early when their confidence drops.

    Who votes, as in the reference (deepconf ``wrapper.py``): the warm-up traces and the later
    ones whose lowest group confidence (the mean of the whole trace when it is shorter than a
    window) reaches the threshold. Every finished trace is judged so, whether or not the monitor
    saw it fall: a short trace never fills a window, and the last token's window can fall below.
    The threshold is always taken from the lowest group confidence, the quantity the monitor
    compares; ``method`` only chooses the vote's weights (the reference's: lowest_group).
    """

    name = "deepconf_online"
    Config = DeepConfOnlineConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        assert isinstance(cfg, DeepConfOnlineConfig)
        request = self._request(ctx, problem)
        threshold, voters = await self._warm_up(ctx, request, min(cfg.n_init, cfg.n))
        weights = [self.score(t) for t in voters]
        monitor = confidence_monitor(threshold, cfg.window)
        launched = min(cfg.n_init, cfg.n)
        while launched < cfg.n and not self._agreed(voters, weights):
            size = min(cfg.batch, cfg.n - launched)
            launched += size
            batch = _Batch(request.with_params(), size, monitor, threshold)
            await self._online_batch(ctx, batch, voters, weights)
        metrics = {
            "threshold": threshold,
            "launched": float(launched),
            "voters": float(sum(t.answer is not None for t in voters)),
        }
        return vote_finish(ctx, voters, weights=weights, metrics=metrics)

    async def _warm_up(self, ctx: RunContext, request: GenerateRequest, n: int) -> tuple[float, list[Trace]]:
        """The threshold the warm-up sets and the warm-up traces that reach it (they vote)."""
        warmup = await self._sample(ctx, request, n, None)
        lowest = [self.lowest_group(t) for t in warmup]
        threshold = percentile(lowest, 100 - self.config.eta) if lowest else 0.0
        for trace, low in zip(warmup, lowest, strict=True):
            if low < threshold:
                trace.meta["deepconf"] = "below threshold"
        return threshold, [t for t, low in zip(warmup, lowest, strict=True) if low >= threshold]

    def lowest_group(self, trace: Trace) -> float:
        """The trace's lowest group confidence: what the threshold is taken from and compared to."""
        return trace_confidence(trace.logprobs, trace.top_logprobs, self.config.window, "lowest_group")

    def _agreed(self, voters: Sequence[Trace], weights: Sequence[float]) -> bool:
        cfg = self.config
        assert isinstance(cfg, DeepConfOnlineConfig)
        if cfg.consensus is None:
            return False
        return leader_share([t.answer for t in voters], weights) >= cfg.consensus

    async def _online_batch(
        self, ctx: RunContext, batch: _Batch, voters: list[Trace], weights: list[float]
    ) -> None:
        async with ctx.fanout(batch.request, n=batch.size, monitor=batch.monitor, label="online") as fan:
            async for trace in fan:
                if not trace.is_ok:
                    continue
                annotate(trace, self.config.extract)
                if self.lowest_group(trace) < batch.threshold:
                    trace.meta["deepconf"] = "below threshold"  # finished, yet a window fell below
                    continue
                voters.append(trace)
                weights.append(self.score(trace))
                if self._agreed(voters, weights):
                    await fan.cancel("deepconf: consensus")
                    return


@dataclass(frozen=True, slots=True)
class _Batch:
    """One online batch: its request and size, the monitor and the threshold it judges by."""

    request: GenerateRequest
    size: int
    monitor: Monitor
    threshold: float


__all__ = [  # the confidence math is re-exported: importers of it from here keep working
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
