"""First Finish Search (Agarwal, Sengupta, Chakraborty; arXiv 2505.18149) and FFS-k@N / LFS-k@N.

FFS launches n samples and keeps the first one to finish; the rest are cancelled (their
partial tokens still count). FFS-k@N waits for k usable finishers and votes over them;
LFS-k@N (the contrast baseline of the follow-up "Art of Scaling Test-Time Compute") lets
all n finish and votes over the k longest.

Sync vs Async FFS is the backend's business, not this strategy's: when the backend has
``native_n`` and ``per_choice_abort`` (the paragen engine), the context runs the n samples
as one shared request in one decode batch and ``fan.cancel`` aborts the other choices in
the same step (Sync-FFS). Otherwise each sample is its own request and cancelling closes
the other streams (Async-FFS). Diversifying openers make the samples distinct requests,
so they always run the async way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import annotate, overrides, prefixed_request, solve_request, vote_finish

# Short openers that nudge samples apart (paragen's own list, after the idea of art_of_tts).
OPENERS: tuple[str, ...] = (
    "Let me think.",
    "First, ",
    "Okay, so",
    "We need to",
    "Let's see:",
    "Start with",
    "Hmm,",
    "To solve this,",
)


class FFSConfig(StrategyConfig):
    n: int = Field(default=4, ge=1, le=1024, description="samples launched at once (paper: 4)")
    k: int = Field(default=1, ge=1, description="finishers to vote over (FFS-k@N; 1 = plain FFS)")
    order: Literal["first", "last"] = Field(default="first", description="first = FFS, last = LFS-k@N")
    allow_truncated: bool = Field(default=False, description="may a length-capped trace count as finished")
    require_answer: bool = Field(default=True, description="skip finishers without a parseable answer")
    diversify: bool = Field(default=False, description="prefill each sample with a different opener")
    openers: tuple[str, ...] = Field(default=OPENERS, min_length=1)
    temperature: float | None = Field(default=0.6, ge=0, description="paper: 0.6 (None = run default)")
    top_p: float | None = Field(default=0.95, gt=0, le=1, description="paper: 0.95 (None = run default)")
    max_tokens: TokenCount | None = Field(default=None, description="None = run default")
    extract: ExtractMode = "auto"

    @model_validator(mode="after")
    def _k_within_n(self) -> FFSConfig:
        # Checked when the config is built, so a sweep refuses k > n before any problem runs.
        if self.k > self.n:
            raise ValueError(f"k={self.k} is more than n={self.n}; choose k <= n")
        return self


def is_usable(trace: Trace, *, allow_truncated: bool, require_answer: bool) -> bool:
    """Whether a finished trace may count as a finisher."""
    if not trace.is_ok:
        return False
    if trace.is_truncated and not allow_truncated:
        return False
    return trace.answer is not None or not require_answer


def first_k(finished: Sequence[Trace], k: int, *, allow_truncated: bool, require_answer: bool) -> list[Trace]:
    """The first ``k`` usable traces in finishing order (fewer if fewer are usable)."""
    usable = [
        t for t in finished if is_usable(t, allow_truncated=allow_truncated, require_answer=require_answer)
    ]
    return usable[:k]


def longest_k(
    finished: Sequence[Trace], k: int, *, allow_truncated: bool, require_answer: bool
) -> list[Trace]:
    """The ``k`` usable traces with the most tokens (LFS-k@N); ties keep finishing order."""
    usable = [
        t for t in finished if is_usable(t, allow_truncated=allow_truncated, require_answer=require_answer)
    ]
    return sorted(usable, key=lambda t: -t.completion_tokens)[:k]


def offline_ffs_k(lengths: Sequence[int], answers: Sequence[str | None], k: int) -> tuple[list[int], int]:
    """FFS-k@N from stored samples, as art_of_tts evaluates it: indices voted over and the cutoff.

    Valid samples (answer not NO_ANSWER) are sorted by length; the cutoff is the k-th shortest
    valid length and every valid sample no longer than it votes. With fewer than k valid samples
    the cutoff is the longest of all samples, answered or not (``evaluate_vanilla.py``: one has to
    wait for every sample to know no k-th answer comes). The cutoff is the sequential cost.
    """
    valid = sorted((lengths[i], i) for i in range(len(lengths)) if answers[i] is not None)
    cutoff = valid[k - 1][0] if len(valid) >= k else max(lengths, default=0)
    return [i for length, i in valid if length <= cutoff], cutoff


class FFS(BaseStrategy[FFSConfig]):
    """First Finish Search: n samples at once, the first k usable finishers vote (k=1: first wins)."""

    name = "ffs"
    Config = FFSConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        if cfg.k > cfg.n:
            raise ConfigError(f"{self.name}: k={cfg.k} is more than n={cfg.n}", hint="choose k <= n")
        finished: list[Trace] = []
        chosen: list[Trace] = []
        requests = self._requests(ctx, problem)
        n = None if isinstance(requests, list) else cfg.n
        async with ctx.fanout(requests, n=n) as fan:
            async for trace in fan:
                finished.append(self._annotate(trace))
                if cfg.order == "first":
                    chosen = first_k(
                        finished,
                        cfg.k,
                        allow_truncated=cfg.allow_truncated,
                        require_answer=cfg.require_answer,
                    )
                    if len(chosen) == cfg.k:
                        ctx.emit("ffs: enough finishers", winners=[t.id for t in chosen])
                        await fan.cancel("first-finish")
                        break
        return self._finish(ctx, finished, chosen)

    def _requests(self, ctx: RunContext, problem: Problem) -> GenerateRequest | list[GenerateRequest]:
        cfg = self.config
        params = overrides(cfg.temperature, cfg.top_p, cfg.max_tokens)
        if not cfg.diversify:
            return solve_request(ctx, problem.question, n=cfg.n, **params)
        if not ctx.capabilities.continue_final:
            ctx.emit("ffs: backend cannot continue a prefilled reply; openers ignored")
            return solve_request(ctx, problem.question, n=cfg.n, **params)
        openers = [cfg.openers[i % len(cfg.openers)] for i in range(cfg.n)]
        return [prefixed_request(ctx, problem.question, op, **params) for op in openers]

    def _annotate(self, trace: Trace) -> Trace:
        return annotate(trace, self.config.extract)

    def _finish(self, ctx: RunContext, finished: list[Trace], chosen: list[Trace]) -> StrategyResult:
        cfg = self.config
        if cfg.order == "last":
            chosen = longest_k(
                finished, cfg.k, allow_truncated=cfg.allow_truncated, require_answer=cfg.require_answer
            )
        fallback = not chosen
        if fallback:  # nobody usable finished: vote over whatever gave an answer, truncated or not
            chosen = [t for t in finished if t.answer is not None]
        metrics = {
            "finishers_voted": float(len(chosen)),
            "fallback": float(fallback),
            "winner_tokens": float(chosen[0].completion_tokens) if chosen else 0.0,
            "first_finish_s": float(chosen[0].end or 0.0) if chosen else 0.0,
        }
        # Ties go to the answer first in sample order (trace ids are given in sample order), as
        # art_of_tts's vote counts its samples in file order; not the order they finished in.
        return vote_finish(ctx, sorted(chosen, key=lambda t: t.id), metrics=metrics)


class FFSkConfig(FFSConfig):
    n: int = Field(default=8, ge=1, le=1024)
    k: int = Field(default=3, ge=1)


class FFSk(FFS):
    """FFS-k@N with the follow-up paper's setting as defaults (k=3 of n=8)."""

    name = "ffs_k"
    Config = FFSkConfig


class LFSkConfig(FFSkConfig):
    order: Literal["first", "last"] = "last"


class LFSk(FFS):
    """LFS-k@N: all n finish, the k longest vote (the contrast to FFS-k@N)."""

    name = "lfs_k"
    Config = LFSkConfig
