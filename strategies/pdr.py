"""Parallel-Distill-Refine and Sequential Refinement (Madaan et al., arXiv 2510.01123).

PDR runs rounds r = 1..R: M_r drafts in parallel (conditioned on the previous round's
workspace), then a distill operator turns them into bounded workspaces (|C| <= kappa tokens,
rebuilt every round, never accumulated). The last round has M_R = 1 and its draft is the
answer. SR is PDR with M = [1, ..., 1]: each round refines the single previous draft.

Both budgets of the paper are reported in ``metrics``: ``seq_budget`` = input + output
tokens along the accepted path (per round the most expensive draft, as it bounds the
round's latency, plus the distill call) and ``total_budget`` = input + output of every call.

Drafts may come from another registered strategy (``draft_strategy="ffs"``): each draft
is then one run of it through ``ctx.run_strategy`` on a problem whose question carries the
workspace, so FFS, DeepPrune or majority can sit inside every PDR round.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from paragen import BaseStrategy, RunContext, Strategy, StrategyConfig, build_strategy, parallel_samples
from paragen.answers import ExtractMode, majority_vote
from paragen.types import Problem, StrategyResult, TokenCount, Trace
from strategies._distill import (
    SELECTORS,
    Draft,
    agreement_scores,
    bounded,
    global_summary,
    load_draft_ranker,
)
from strategies._toolkit import annotate, overrides, solve_request

Operator = Literal["global_summary", "shared_topk", "per_sample_topk", "random_k"]

REFINE_TEMPLATE = (
    "{question}\n\nHere is what earlier attempts produced (they may contain mistakes):\n\n{workspace}\n\n"
    "Keep what is right, fix what is wrong, and write one complete improved solution. "
    "End with the final answer as \\boxed{{ANSWER}}."
)


def refine_question(question: str, workspace: str | None) -> str:
    """The question a round's draft answers: the task alone, or the task plus its workspace."""
    return question if not workspace else REFINE_TEMPLATE.format(question=question, workspace=workspace)


def paper_budgets(rounds: Sequence[Sequence[Draft]], distills: Sequence[Draft]) -> tuple[int, int]:
    """(B_seq, B_tot): input+output tokens on the accepted path, and over every call."""
    seq = sum(max((d.cost for d in drafts), default=0) for drafts in rounds) + sum(d.cost for d in distills)
    total = sum(d.total_cost for drafts in rounds for d in drafts) + sum(d.total_cost for d in distills)
    return seq, total


class PDRConfig(StrategyConfig):
    parallelism: tuple[int, ...] = Field(default=(4, 2, 1), description="M_1..M_R, drafts per round; M_R = 1")
    width: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="-n: M_1, halved each round down to 1 (8 -> (8, 4, 2, 1)); sets parallelism",
    )
    operator: Operator = Field(default="per_sample_topk", description="distill operator")
    k: int = Field(default=2, ge=1, description="drafts per workspace (top-k / random-k)")
    kappa: TokenCount = Field(default=1024, ge=16, description="workspace bound in tokens")
    scorer: str | None = Field(default=None, description="'module:function' draft scorer; None = agreement")
    draft_strategy: str | None = Field(default=None, description="registered strategy producing each draft")
    draft_options: dict[str, Any] = Field(default_factory=dict)
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: TokenCount | None = Field(default=None, description="per draft call; None = run default")
    seed: int = 0
    extract: ExtractMode = "auto"

    @field_validator("parallelism")
    @classmethod
    def _ends_with_one(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or value[-1] != 1 or min(value) < 1:
            raise ValueError("parallelism must be positive and end with 1 (the last round gives the answer)")
        return value

    @field_validator("scorer")
    @classmethod
    def _loadable(cls, value: str | None) -> str | None:
        load_draft_ranker(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _width_sets_parallelism(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("width") is None:
            return data
        if data.get("parallelism") is not None:
            raise ValueError("give width (-n) or parallelism, not both")
        return {**data, "parallelism": halving(data["width"])}

    def parallel_samples(self) -> int:
        """Samples in flight at once: the widest round's drafts, each as wide as the draft strategy."""
        per_draft = 1
        if self.draft_strategy is not None:
            per_draft = parallel_samples(build_strategy(self.draft_strategy, self.draft_options))
        return max(self.parallelism) * per_draft


def halving(width: int) -> tuple[int, ...]:
    """Drafts per round from a first round of ``width``: halved (rounded down) until 1 (6 -> (6, 3, 1))."""
    rounds = [width]
    while rounds[-1] > 1:
        rounds.append(rounds[-1] // 2)
    return tuple(rounds)


class PDR(BaseStrategy[PDRConfig]):
    """Parallel-Distill-Refine: rounds of parallel drafts distilled into a bounded workspace."""

    name = "pdr"
    Config = PDRConfig
    count_field: ClassVar[str | None] = "width"  # -n and serve's "pdr-N" set the first round's drafts

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        rng = random.Random(cfg.seed)
        sub = None if cfg.draft_strategy is None else build_strategy(cfg.draft_strategy, cfg.draft_options)
        rounds: list[list[Draft]] = []
        distills: list[Draft] = []
        workspaces: list[str | None] = [None] * cfg.parallelism[0]
        for r, m in enumerate(cfg.parallelism):
            with ctx.phase("round", round=r, drafts=m):
                drafts = await self._round(ctx, problem, r, workspaces, sub, rounds)
                rounds.append(drafts)
                if r + 1 < len(cfg.parallelism):
                    workspaces = await self._distill(
                        ctx, problem, drafts, cfg.parallelism[r + 1], rng, distills
                    )
            ctx.emit("pdr round done", round=r, drafts=m, answers=[d.answer for d in drafts])
        return self._finish(ctx, rounds, distills)

    async def _round(
        self,
        ctx: RunContext,
        problem: Problem,
        r: int,
        workspaces: list[str | None],
        sub: Strategy | None,
        rounds: list[list[Draft]],
    ) -> list[Draft]:
        questions = [refine_question(problem.question, w) for w in workspaces]
        if sub is not None:
            problems = [Problem(id=f"{problem.id}/r{r}d{i}", question=q) for i, q in enumerate(questions)]
            results = await ctx.run_strategies(sub, problems, label=f"round{r}/draft")
            return [_draft_of(res) for res in results]
        parents = [i for d in (rounds[-1] if rounds else []) for i in d.trace_ids]
        cfg = self.config
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        if len(set(questions)) == 1:  # one shared request: the engine prefills it once for all
            request: Any = solve_request(ctx, questions[0], n=len(questions), **params)
            n: int | None = len(questions)
        else:
            request, n = [solve_request(ctx, q, **params) for q in questions], None
        drafts: list[Draft] = []
        async with ctx.fanout(request, n=n, label=f"round{r}", parents=parents) as fan:
            async for trace in fan:
                drafts.append(_draft_of_trace(annotate(trace, cfg.extract)))
        return drafts

    async def _distill(
        self,
        ctx: RunContext,
        problem: Problem,
        drafts: list[Draft],
        m: int,
        rng: random.Random,
        calls: list[Draft],
    ) -> list[str | None]:
        cfg = self.config
        if cfg.operator == "global_summary":
            text, call = await global_summary(ctx, problem.question, drafts, cfg.kappa)
            calls.append(call)
            return [text] * m
        scorer = load_draft_ranker(cfg.scorer)
        answers = [d.answer for d in drafts]
        texts = [d.text for d in drafts]
        scores = list(scorer(problem.question, texts, answers)) if scorer else agreement_scores(answers)
        picks = SELECTORS[cfg.operator](scores, cfg.k, m, rng)
        return [await bounded(ctx, [texts[i] for i in pick], cfg.kappa) for pick in picks]

    def _finish(self, ctx: RunContext, rounds: list[list[Draft]], distills: list[Draft]) -> StrategyResult:
        final = rounds[-1][0]
        answer, text = final.answer, final.text
        fallback = answer is None and len(rounds) > 1
        if fallback:  # the refiner gave no answer: fall back to the previous round's vote
            answer = majority_vote([d.answer for d in rounds[-2]])
        seq, total = paper_budgets(rounds, distills)
        metrics = {
            "seq_budget": float(seq),
            "total_budget": float(total),
            "rounds": float(len(rounds)),
            "fallback": float(fallback),
        }
        return ctx.finish(answer, text=text, metrics=metrics)


def _draft_of_trace(trace: Trace) -> Draft:
    return Draft(trace.text, trace.answer, [trace.id], trace.prompt_tokens, trace.completion_tokens)


def _draft_of(result: StrategyResult) -> Draft:
    """A sub-strategy's result as one draft; its cost is its own critical path plus its prompt."""
    samples = [t for t in result.traces if t.kind == "sample"]
    prompt = max((t.prompt_tokens for t in samples), default=0)
    everything = result.usage.total_tokens + result.usage.prompt_tokens
    ids = [t.id for t in samples]
    return Draft(result.text or "", result.answer, ids, prompt, result.usage.sequential_tokens, everything)


class SRConfig(PDRConfig):
    parallelism: tuple[int, ...] = Field(default=(1, 1, 1), description="SR: ones, one round per refinement")
    width: None = Field(default=None, description="not used: SR has one draft per round")
    operator: Operator = "shared_topk"
    k: int = 1


class SR(PDR):
    """Sequential Refinement: PDR with one draft per round, each refining the previous one."""

    name = "sr"
    Config = SRConfig
    count_field = None  # one draft per round: -n has nothing to set
