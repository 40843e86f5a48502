"""Particle filtering (Puri et al. 2025, "A probabilistic inference approach to inference-time scaling
of LLMs using particle-based Monte Carlo methods"; Red Hat its_hub).

``n`` particles, each a partial solution. Each iteration extends every unfinished particle by one
step (scored as soon as it is written); a particle's weight is its value (``aggregate``, default
the latest step's score) mapped to a logit, as its_hub does, over ``temperature``. Then the whole
population, finished particles included with their final weights (its_hub carries them over the
same way), is resampled: ``n`` draws with probabilities softmax(weights). Copies of one particle
grow apart at the next step (distinct seeds). The draws come from a ``random.Random`` seeded by
the run's seed (or ``seed``) and the problem id, so a seeded run resamples the same way again.
No resampling once every particle has finished. The answer: the highest-weighted finished
particle's (``select="argmax"``, its_hub's default) or the weighted vote over the finished ones.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.types import Problem, StrategyResult
from strategies._search_common import Path, StepFields, weighted_finish
from strategies._search_steps import StepSearch, check_continuation

EPS = 1e-7  # its_hub clips scores to [eps, 1 - eps] before the logit


class ParticleFilteringConfig(StepFields):
    n: int = Field(default=8, ge=1, le=4096, description="particles")
    resample_temperature: float = Field(default=1.0, gt=0, description="softmax(weights / this)")
    weight: Literal["logit", "raw"] = Field(
        default="logit", description="logit of a [0, 1] score (its_hub); raw for an ORM's unbounded reward"
    )
    select: Literal["argmax", "vote"] = "argmax"
    seed: int | None = Field(default=None, description="resampling seed; None = the run's sampling seed")


def log_weight(value: float, kind: Literal["logit", "raw"]) -> float:
    if kind == "raw":
        return value
    p = min(max(value, EPS), 1 - EPS)
    return math.log(p / (1 - p))


def resampling_probabilities(weights: list[float], temperature: float) -> list[float]:
    """softmax(weights / temperature), shifted by the largest for stability."""
    scaled = [w / temperature for w in weights]
    top = max(scaled)
    exps = [math.exp(w - top) for w in scaled]
    total = sum(exps)
    return [e / total for e in exps]


class ParticleFiltering(BaseStrategy[ParticleFilteringConfig]):
    """n particles grown a step at a time, resampled by their verifier scores after every step."""

    name = "particle_filtering"
    Config = ParticleFilteringConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        check_continuation(ctx)
        search = StepSearch(ctx, cfg, problem.question)
        seed = cfg.seed if cfg.seed is not None else ctx.defaults.seed
        rng = random.Random(f"particle_filtering/{0 if seed is None else seed}/{problem.id}")
        particles, ran = [Path() for _ in range(cfg.n)], 0
        for depth in range(cfg.max_depth):
            growing = [p for p in particles if not p.finished]
            if not growing:
                break
            grown = await search.expand(growing, 1, depth=depth)
            ran = depth + 1
            # A particle whose sample failed is lost; the others (and the finished ones) go on.
            population = [p for p in particles if p.finished] + [p for found in grown for p in found]
            if not population:
                break
            particles = (
                population
                if all(p.finished for p in population)
                else self._resample(ctx, rng, population, depth)
            )
        return self._finish(ctx, particles, metrics={"depth": float(ran)})

    def _weights(self, particles: list[Path]) -> list[float]:
        cfg = self.config
        return [log_weight(p.value(cfg.aggregate), cfg.weight) for p in particles]

    def _resample(
        self, ctx: RunContext, rng: random.Random, population: list[Path], depth: int
    ) -> list[Path]:
        probs = resampling_probabilities(self._weights(population), self.config.resample_temperature)
        drawn = rng.choices(range(len(population)), weights=probs, k=self.config.n)
        counts = Counter(population[i].last_id for i in drawn)
        ctx.emit(
            "particle_filtering: resampled",
            depth=depth,
            probabilities={p.last_id: round(q, 6) for p, q in zip(population, probs, strict=True)},
            copies=dict(sorted(counts.items())),
        )
        return [population[i] for i in drawn]

    def _finish(self, ctx: RunContext, particles: list[Path], metrics: dict[str, float]) -> StrategyResult:
        cfg = self.config
        pool = [p for p in particles if p.finished] or particles
        metrics["finished"] = float(sum(p.finished for p in particles))
        if cfg.select == "vote":
            return weighted_finish(ctx, pool, cfg, metrics=metrics)
        weights = self._weights(pool)
        best = max(range(len(pool)), key=lambda i: (weights[i], -pool[i].last_id))
        return weighted_finish(ctx, [pool[best]], cfg, metrics=metrics)
