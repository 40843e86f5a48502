"""Heavy thinking, HeavySkill (Wang et al., arXiv 2605.02396): K traces, then a deliberation that reads them.

``reason_k`` traces are sampled in parallel. Then ``summary_k`` deliberation passes run at once;
each reads the traces (all of them, or ``read_k`` drawn at random), in a seeded random order,
critiques them, may overrule their majority or re-derive the result, and writes its own final
boxed answer. With ``iterations`` > 1 the deliberations' outputs join the traces as further
thinkers and the deliberation runs again on the grown set. The answer is the majority over the
last iteration's deliberations (the paper's HM@K is their mean accuracy); where none of them
gives an answer, the traces' majority stands (``metrics["fallback"]``).

Matched against the authors' workflow ``wjn1996/HeavySkill`` as its README documents it
(``scripts/run_heavyskill.py``: ``--reason_k`` 8 parallel trajectories, ``--summary_k`` 4
deliberation samples, ``--iterations`` 1, a separate ``--summary_model`` for the deliberation,
which is ``reader`` here) and against the paper's skill document as republished in
``Sandjab/HeavySkill`` ``skills/heavy-thinking/SKILL.md`` (``build_deliberation_prompt``: the
query, then every trajectory between ``Thinker #i`` markers; shuffle the trajectories against
position bias; iterate by feeding the deliberation back as one more thinker; sampling at
temperature 1.0, top-p 0.95). The authors' repository itself could not be read here, so its
prompt files were not compared; the prompt below is paragen's own wording.
"""

from __future__ import annotations

import random
from typing import ClassVar

from pydantic import Field, model_validator

from paragen import BaseStrategy, RunContext
from paragen.answers import answer_key, majority_vote
from paragen.types import Problem, StrategyResult, Trace
from strategies._reading import ReadingConfig, read, readable, reading_rng, run_seed, sample_candidates, shown
from strategies._toolkit import vote_finish

DELIBERATE_TEMPLATE = (
    "Several people worked on the problem below independently. Their attempts follow, each between "
    "markers.\n\nProblem: {question}\n\n{thinkers}\n\nStudy every attempt: follow its reasoning, find "
    "its mistakes and gaps, and compare the approaches. The most common answer is only a hint, not "
    "proof; a minority answer with sound reasoning may be right, and all of them may be wrong, in "
    "which case solve the problem yourself. Then write your own complete solution and put the final "
    "answer in \\boxed{{}}."
)


class HeavyConfig(ReadingConfig):
    reason_k: int = Field(default=8, ge=1, le=1024, description="parallel traces (HeavySkill --reason_k)")
    summary_k: int = Field(
        default=4, ge=1, le=64, description="deliberation samples (HeavySkill --summary_k)"
    )
    iterations: int = Field(
        default=1, ge=1, le=8, description="deliberation rounds (HeavySkill --iterations)"
    )
    read_k: int | None = Field(
        default=None, ge=1, description="traces each deliberation reads, drawn at random; None = all"
    )
    shuffle: bool = Field(default=True, description="each deliberation reads in its own seeded order")
    template: str = Field(default=DELIBERATE_TEMPLATE, description="uses {question}, {thinkers}")

    @model_validator(mode="after")
    def _read_k_fits(self) -> HeavyConfig:
        if self.read_k is not None and self.read_k > self.reason_k:
            raise ValueError(f"read_k ({self.read_k}) must not exceed reason_k ({self.reason_k})")
        return self

    def parallel_samples(self) -> int:
        return max(self.reason_k, self.summary_k)


def thinkers(texts: list[str]) -> str:
    """The attempts between numbered markers, as the skill document's prompt builder lays them out."""
    return "\n".join(
        f"===== Thinker #{i + 1} =====\n{t}\n===== End of thinker #{i + 1} =====" for i, t in enumerate(texts)
    )


def reading_order(pool: list[int], read_k: int | None, shuffle: bool, rng: random.Random) -> list[int]:
    """What one deliberation reads: ``read_k`` of the pool (all when None), shuffled or in pool order."""
    chosen = pool if read_k is None or read_k >= len(pool) else sorted(rng.sample(pool, read_k))
    return rng.sample(chosen, len(chosen)) if shuffle else list(chosen)


class Heavy(BaseStrategy[HeavyConfig]):
    """K traces, then summary_k deliberations that critique them and answer; optionally iterated."""

    name = "heavy"
    Config = HeavyConfig
    count_field: ClassVar[str | None] = "reason_k"  # -n sets the parallel traces

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        rng = reading_rng(self.name, run_seed(ctx, cfg.seed), problem.id)
        traces = await sample_candidates(ctx, problem.question, cfg.reason_k, cfg)
        pool = [traces[i] for i in readable(traces, cfg.view, ctx)]
        deliberations: list[Trace] = []
        if not pool:  # nothing to read: no deliberation, no answer
            return ctx.finish(None, metrics={"fallback": 1.0, "overruled": 0.0, "deliberations": 0.0})
        for it in range(cfg.iterations):
            orders = [
                reading_order(list(range(len(pool))), cfg.read_k, cfg.shuffle, rng)
                for _ in range(cfg.summary_k)
            ]
            deliberations = await self._deliberate(ctx, problem, pool, orders, it)
            ctx.emit("heavy deliberation done", iteration=it, answers=[d.answer for d in deliberations])
            pool = pool + [d for d in deliberations if d.is_ok and shown(d, cfg.view, ctx)]
        return self._finish(ctx, traces, deliberations)

    async def _deliberate(
        self, ctx: RunContext, problem: Problem, pool: list[Trace], orders: list[list[int]], it: int
    ) -> list[Trace]:
        """``summary_k`` deliberations at once, in the order they were drawn."""
        cfg = self.config
        out: list[Trace | None] = [None] * len(orders)

        async def one(d: int) -> None:
            read_here = [pool[i] for i in orders[d]]
            prompt = cfg.template.format(
                question=problem.question, thinkers=thinkers([shown(t, cfg.view, ctx) for t in read_here])
            )
            parents = [t.id for t in read_here]
            trace = await read(
                ctx, prompt, cfg, parents=parents, label=f"deliberate{it}", call=it * len(orders) + d
            )
            trace.meta.update(iteration=it, read=parents)
            out[d] = trace

        async with ctx.concurrently() as children:
            for d in range(len(orders)):
                children.start(one, d)
        return [t for t in out if t is not None]

    def _finish(self, ctx: RunContext, traces: list[Trace], deliberations: list[Trace]) -> StrategyResult:
        majority = majority_vote([t.answer for t in traces])
        fallback = all(d.answer is None for d in deliberations)
        result = vote_finish(ctx, traces if fallback else deliberations)
        overruled = (
            result.answer is not None
            and majority is not None
            and answer_key(result.answer) != answer_key(majority)
        )
        metrics = {
            "fallback": float(fallback),
            "overruled": float(overruled),
            "deliberations": float(len(deliberations)),
        }
        result.metrics.update(metrics)
        return result
