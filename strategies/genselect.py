"""GenSelect (Toshniwal et al., arXiv 2507.17797; the selector of the AIMO-2 winner, arXiv 2504.16891).

``n`` candidates are sampled; a reading pass shows a model the candidates (their final parts by
default, the whole traces with ``view="whole"``) and asks it to name the best by index. When
there are more than ``group_size`` candidates, they are split into groups of at most
``group_size``, each group names its winner, and the winners meet again, round after round,
until one remains (a group of one goes through unread). The answer is that candidate's answer.

Matched against NeMo-Skills (NVIDIA/NeMo-Skills):
``nemo_skills/inference/model/genselect.py`` (``OnlineGenSelectConfig``: 8 solutions, reader
temperature 0.6, the verdict ``Judgment: IDX`` read by the regex ``Judg[e]?ment: (\\d+)``, last
match, 0-based, an index past the last solution or no match -> a random pick from a seeded
``random.Random``; solutions shuffled by that generator before they are shown, thinking removed)
and ``nemo_skills/prompt/config/generic/genselect.yaml`` (the prompt's shape: the problem, the
enumerated solutions, "end with Judgment: IDX, IDX in 0..max"). The group rounds for large N are
the paper's; optillm's ``genselect`` plugin (``optillm/plugins/genselect_plugin.py``) is the
same single-pass idea with 1-based numbers. The prompt below is paragen's own wording.

Every reading call is recorded on its trace (``meta``: the candidates it read, in the order shown,
its pick, and whether the verdict gave it or a seeded random pick did); ``metrics`` count rounds,
reading calls and unparsable verdicts.
"""

from __future__ import annotations

import random
import re

from pydantic import Field

from paragen import BaseStrategy, RunContext
from paragen.types import Problem, StrategyResult, Trace
from strategies._reading import (
    ReadingConfig,
    groups_of,
    last_number,
    listing,
    pick,
    play,
    read,
    readable,
    reading_rng,
    run_seed,
    sample_candidates,
    shown,
)

SELECT_TEMPLATE = (
    "Here is a problem and {count} candidate solutions to it, numbered 0 to {last}. They were written "
    "independently and may be wrong in different ways.\n\nProblem: {question}\n\n{solutions}\n\n"
    "Examine each solution's reasoning and decide which one is most likely correct. Finish your reply "
    "with a line of the form\nJudgment: IDX\nwhere IDX is the number (0 to {last}) of the best solution."
)
VERDICT = re.compile(r"Judg(?:e)?ment:\s*\**\s*(\d+)")


class GenSelectConfig(ReadingConfig):
    n: int = Field(default=8, ge=1, le=1024, description="candidates sampled (NeMo-Skills max_num_solutions)")
    group_size: int = Field(
        default=8, ge=2, le=64, description="most candidates one reading pass compares; more -> group rounds"
    )
    shuffle: bool = Field(
        default=True, description="show candidates in a seeded random order (position bias)"
    )
    reader_temperature: float | None = Field(default=0.6, ge=0, description="reading pass (NeMo-Skills 0.6)")
    template: str = Field(
        default=SELECT_TEMPLATE, description="uses {question}, {count}, {last}, {solutions}"
    )


def select_prompt(template: str, question: str, texts: list[str]) -> str:
    solutions = listing(texts, name="Solution", first=0)
    return template.format(question=question, count=len(texts), last=len(texts) - 1, solutions=solutions)


class GenSelect(BaseStrategy[GenSelectConfig]):
    """Sample N, let a model read them and name the best (in groups, round after round, for large N)."""

    name = "genselect"
    Config = GenSelectConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        rng = reading_rng(self.name, run_seed(ctx, cfg.seed), problem.id)
        candidates = await sample_candidates(ctx, problem.question, cfg.n, cfg)
        pool = readable(candidates, cfg.view, ctx)
        if cfg.shuffle:
            rng.shuffle(pool)
        metrics = {"readable": float(len(pool)), "rounds": 0.0, "reads": 0.0, "unparsable": 0.0}
        while len(pool) > 1:
            pool = await self._round(ctx, problem, candidates, pool, rng, metrics)
        if not pool:
            return ctx.finish(None, metrics=metrics)
        chosen = candidates[pool[0]]
        metrics["chosen"] = float(pool[0])
        ctx.emit("genselect chose", candidate=pool[0], answer=chosen.answer)
        return ctx.finish(chosen.answer, text=chosen.text, reasoning=chosen.reasoning, metrics=metrics)

    async def _round(
        self,
        ctx: RunContext,
        problem: Problem,
        candidates: list[Trace],
        pool: list[int],
        rng: random.Random,
        metrics: dict[str, float],
    ) -> list[int]:
        """One round: every group of two or more read at once; the groups' winners, in pool order."""
        groups = groups_of(pool, self.config.group_size)
        r, base = int(metrics["rounds"]), int(metrics["reads"])

        async def select(group: list[int], fallback: random.Random, call: int) -> tuple[int, bool]:
            return await self._select(ctx, problem, candidates, group, fallback, r, call)

        winners = await play(ctx, groups, rng, base, select)
        reads = sum(len(g) > 1 for g in groups)
        metrics.update(rounds=r + 1.0, reads=base + float(reads))
        metrics["unparsable"] += sum(not parsed for _, parsed in winners)
        return [w for w, _ in winners]

    async def _select(
        self,
        ctx: RunContext,
        problem: Problem,
        candidates: list[Trace],
        group: list[int],
        fallback: random.Random,
        r: int,
        call: int,
    ) -> tuple[int, bool]:
        """The group's winner (a candidate index) and whether the verdict named it."""
        cfg = self.config
        texts = [shown(candidates[i], cfg.view, ctx) for i in group]
        prompt = select_prompt(cfg.template, problem.question, texts)
        parents = [candidates[i].id for i in group]
        trace = await read(ctx, prompt, cfg, parents=parents, label=f"select{r}", call=call)
        index, parsed = pick(last_number(VERDICT, trace.text) if trace.is_ok else None, len(group), fallback)
        trace.meta.update(round=r, read=group, pick=group[index], parsed=parsed)
        return group[index], parsed
