"""Recursive Self-Aggregation, RSA (Venkatraman et al., arXiv 2509.26626).

A population of ``n`` solutions is sampled; then, for ``t`` steps, each of ``n`` new
candidates is written by a prompt that shows the model ``k`` members of the current
population drawn at random and asks for one improved solution. The new population
replaces the old one, and the answer is the majority over the last population, answers
grouped by math-verify as the reference groups them (``vote="key"``: by ``answer_key``).
``t = 0`` is plain majority voting; PDR is, roughly, one aggregation over all drafts.

The subsets come from a ``random.Random`` seeded by the run's sampling seed (or the
config's ``seed``) and the problem id, so a run with a seed draws the same subsets again.
Each candidate names the members it saw as its parents, so the sequential tokens of the
run are the sum over steps of that step's longest candidate.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode, equivalent
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies._toolkit import annotate, overrides, solve_request, vote_finish

AGGREGATE_TEMPLATE = (
    "{question}\n\nBelow are {k} candidate solutions to this problem, each written independently. "
    "Any of them may contain errors, and they may disagree with each other.\n\n{candidates}\n\n"
    "Check the reasoning of each candidate step by step, keep the parts that hold up, and "
    "write one new, self-contained solution. If every candidate is wrong, solve the problem "
    "from scratch. Write the final answer as \\boxed{{ANSWER}}."
)


class RSAConfig(StrategyConfig):
    n: int = Field(default=8, ge=1, le=1024, description="population size N (candidates per step)")
    k: int = Field(default=4, ge=1, description="candidates shown to each aggregation prompt (K <= N)")
    t: int = Field(
        default=2,
        ge=0,
        le=64,
        description="aggregation steps after the first population (the paper's T counts the first "
        "population too: its T=10 is t=9; or give loops)",
    )
    loops: int | None = Field(
        default=None,
        ge=1,
        le=65,
        description="populations in all, the first included, as the reference's --loops (sets t = loops - 1)",
    )
    template: str = Field(default=AGGREGATE_TEMPLATE, description="uses {question}, {k}, {candidates}")
    seed: int | None = Field(default=None, description="subset seed; None = the run's sampling seed")
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = Field(default=None, description="per candidate; None = run default")
    extract: ExtractMode = "auto"
    vote: Literal["math_verify", "key"] = Field(
        default="math_verify",
        description="math_verify: answers grouped by math-verify against each group's first answer "
        "(the reference's vote); key: paragen's answer_key grouping",
    )

    @model_validator(mode="after")
    def _k_fits(self) -> RSAConfig:
        if self.k > self.n:
            raise ValueError(f"k ({self.k}) must not exceed the population n ({self.n})")
        return self

    @model_validator(mode="before")
    @classmethod
    def _loops_set_t(cls, values: Any) -> Any:
        # The reference (HyperPotatoNeo/RSA, eval_loop.py --loops) counts the first population as a
        # loop; ``loops`` takes a number copied from there, ``t`` counts aggregations only.
        if not isinstance(values, dict) or values.get("loops") is None:
            return values
        try:
            loops, t = int(values["loops"]), int(values.get("t", int(values["loops"]) - 1))
        except (TypeError, ValueError):
            return values  # the fields' own checks report it
        if loops < 1:
            return values
        if t != loops - 1:
            raise ValueError(f"t ({t}) and loops ({loops}) disagree: loops = t + 1")
        return {**values, "t": loops - 1}


def subset_rng(seed: int | None, problem_id: str) -> random.Random:
    """The subsets' generator: one stream per (seed, problem), reproducible across runs."""
    return random.Random(f"rsa/{0 if seed is None else seed}/{problem_id}")


def draw_subsets(rng: random.Random, n: int, k: int) -> list[list[int]]:
    """``n`` subsets of ``k`` distinct population indices (sorted, so prompts list them in order)."""
    return [sorted(rng.sample(range(n), k)) for _ in range(n)]


def answer_groups(answers: Sequence[str | None]) -> list[list[int]]:
    """The reference's vote groups (HyperPotatoNeo/RSA ``evaluate_k_answers_math``): in population
    order each answer joins the first group whose first answer math-verify finds equal to it, else
    opens a group. Unanswered members are left out (the reference gives each a group of its own,
    an empty answer that can only win as a wrong one)."""
    groups: list[list[int]] = []
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        group = next((g for g in groups if equivalent(answer, answers[g[0]] or "")), None)
        if group is None:
            groups.append([i])
        else:
            group.append(i)
    return groups


def cluster_winner(answers: Sequence[str | None]) -> int | None:
    """The index of the winning group's first answer: the first group with the most answers."""
    groups = answer_groups(answers)
    return max(groups, key=len)[0] if groups else None


def aggregate_prompt(template: str, question: str, texts: list[str]) -> str:
    candidates = "\n\n".join(f"Candidate {i + 1}:\n{text.strip()}" for i, text in enumerate(texts))
    return template.format(question=question, k=len(texts), candidates=candidates)


class RSA(BaseStrategy[RSAConfig]):
    """A population refined by random K-subset aggregation for T steps; majority over the last one."""

    name = "rsa"
    Config = RSAConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        seed = cfg.seed if cfg.seed is not None else ctx.defaults.seed
        rng = subset_rng(seed, problem.id)
        population = await self._first(ctx, problem)
        ctx.emit("rsa step done", step=0, answers=[t.answer for t in population])
        for step in range(1, cfg.t + 1):
            subsets = draw_subsets(rng, cfg.n, cfg.k)
            population = await self._aggregate(ctx, problem, step, population, subsets)
            ctx.emit("rsa step done", step=step, subsets=subsets, answers=[t.answer for t in population])
        metrics = {"steps": float(cfg.t + 1)}
        if cfg.vote == "key":
            return vote_finish(ctx, population, metrics=metrics)
        return self._cluster_finish(ctx, population, metrics)

    def _cluster_finish(
        self, ctx: RunContext, population: list[Trace], metrics: dict[str, float]
    ) -> StrategyResult:
        """The reference's vote: the winning group's first member gives the answer and the text."""
        groups = answer_groups([t.answer for t in population])
        metrics["distinct_answers"] = float(len(groups))
        if not groups:
            return ctx.finish(None, metrics={**metrics, "votes_for_winner": 0.0})
        group = max(groups, key=len)
        first = population[group[0]]
        metrics["votes_for_winner"] = float(len(group))
        return ctx.finish(first.answer, text=first.text, reasoning=first.reasoning, metrics=metrics)

    def _params(self) -> dict[str, Any]:
        return overrides(self.config.temperature, None, self.config.max_tokens)

    async def _first(self, ctx: RunContext, problem: Problem) -> list[Trace]:
        request = solve_request(ctx, problem.question, n=self.config.n, **self._params())
        async with ctx.fanout(request, label="step0") as fan:
            async for trace in fan:
                annotate(trace, self.config.extract)
            return fan.traces

    async def _aggregate(
        self, ctx: RunContext, problem: Problem, step: int, population: list[Trace], subsets: list[list[int]]
    ) -> list[Trace]:
        cfg = self.config
        new: list[Trace | None] = [None] * len(subsets)

        async def one(i: int) -> None:
            members = [population[j] for j in subsets[i]]
            question = aggregate_prompt(cfg.template, problem.question, [m.text for m in members])
            params = self._params()
            if ctx.defaults.seed is not None:  # distinct seeds, as a fan-out's choices get
                params["seed"] = ctx.defaults.seed + step * cfg.n + i
            request = solve_request(ctx, question, **params)
            trace = await ctx.sample(request, label=f"step{step}", parents=[m.id for m in members])
            trace.meta["subset"] = subsets[i]
            new[i] = annotate(trace, cfg.extract)

        async with ctx.concurrently() as children:
            for i in range(len(subsets)):
                children.start(one, i)
        return [t for t in new if t is not None]
