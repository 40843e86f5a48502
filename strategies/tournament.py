"""Knockout tournament over sampled candidates (PairJudge RM, arXiv 2501.13007; NeMo-Skills' prompted one).

``n`` candidates are sampled. Each round the remaining ones are shuffled and cut into games of
``group_size``; a judge prompt shows a game's candidates and names the best as
``<best_solution>i</best_solution>`` (1-based); the others leave. Rounds go on until
``winner_count`` remain, and the answer is the majority over them (the winner's, for one).

Matched against NeMo-Skills ``nemo_skills/inference/tournament_utils.py``
(``KnockoutTournamentManager.run_tournament`` and ``ProofKnockoutTournamentManager``): empty
participants are knocked out before the first game; each round reshuffles the remaining ones with
the manager's seeded generator and plays every batch of two or more at once (a lone leftover waits
for the next round); a verdict is read after ``</think>`` from the last ``<best_solution>`` tag,
1-based; a verdict that does not parse is a random winner of that game, logged as such; the
knocked-out list is cut back so exactly ``winner_count`` remain (the latest eliminations are
undone). Two deliberate differences: an index of 0 or past the game is unparsable here (there,
``0`` became Python's index -1, the game's last participant), and each game draws its fallback
from its own generator, made before the games run, so the order they finish in never changes a
seeded run. The prompt below is paragen's own wording; the default game of two is PairJudge's
pairwise comparison.
"""

from __future__ import annotations

import random
import re

from pydantic import Field, model_validator

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
from strategies._toolkit import vote_finish

JUDGE_TEMPLATE = (
    "You are judging {count} solutions to the same problem, numbered 1 to {count}. At most one "
    "approach should be trusted: check each one's steps and its final result.\n\nProblem: {question}"
    "\n\n{solutions}\n\nAfter your analysis, name the single best solution as "
    "<best_solution>i</best_solution>, with i between 1 and {count}."
)
VERDICT = re.compile(r"<best_solution>(.*?)</best_solution>", re.DOTALL)


class TournamentConfig(ReadingConfig):
    n: int = Field(default=8, ge=1, le=1024, description="candidates sampled")
    group_size: int = Field(
        default=2, ge=2, le=64, description="candidates per game (2: pairwise, as PairJudge)"
    )
    winner_count: int = Field(default=1, ge=1, description="candidates left when the tournament stops")
    template: str = Field(default=JUDGE_TEMPLATE, description="uses {question}, {count}, {solutions}")

    @model_validator(mode="after")
    def _winners_fit(self) -> TournamentConfig:
        if self.winner_count > self.n:
            raise ValueError(f"winner_count ({self.winner_count}) must not exceed n ({self.n})")
        return self


def judge_prompt(template: str, question: str, texts: list[str]) -> str:
    return template.format(
        question=question, count=len(texts), solutions=listing(texts, name="Solution", first=1)
    )


def games_of(remaining: list[int], size: int) -> list[list[int]]:
    """The round's games: ``remaining`` (shuffled already) in batches of ``size``, lone leftovers dropped."""
    return [batch for batch in groups_of(remaining, size) if len(batch) >= 2]


class Tournament(BaseStrategy[TournamentConfig]):
    """Sample N; games of k judged by a prompt knock the losers out until winner_count remain; vote."""

    name = "tournament"
    Config = TournamentConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        rng = reading_rng(self.name, run_seed(ctx, cfg.seed), problem.id)
        candidates = await sample_candidates(ctx, problem.question, cfg.n, cfg)
        valid = set(readable(candidates, cfg.view, ctx))
        out = [i for i in range(len(candidates)) if i not in valid]  # empty ones leave first
        metrics = {"rounds": 0.0, "games": 0.0, "unparsable": 0.0, "invalid": float(len(out))}
        while len(out) < len(candidates) - cfg.winner_count:
            remaining = [i for i in range(len(candidates)) if i not in out]
            rng.shuffle(remaining)
            games = games_of(remaining, cfg.group_size)
            if not games:
                break
            out += await self._round(ctx, problem, candidates, games, rng, metrics)
        out = out[: max(0, len(candidates) - cfg.winner_count)]
        winners = [candidates[i] for i in range(len(candidates)) if i not in out and i in valid]
        metrics["winners"] = float(len(winners))
        ctx.emit("tournament done", winners=[t.id for t in winners], knocked_out=out)
        return vote_finish(ctx, winners, metrics=metrics)

    async def _round(
        self,
        ctx: RunContext,
        problem: Problem,
        candidates: list[Trace],
        games: list[list[int]],
        rng: random.Random,
        metrics: dict[str, float],
    ) -> list[int]:
        """Every game of the round at once; the losers, game by game in the order the games were cut."""
        r, base = int(metrics["rounds"]), int(metrics["games"])

        async def judge(game: list[int], fallback: random.Random, call: int) -> tuple[int, bool]:
            return await self._judge(ctx, problem, candidates, game, fallback, r, call)

        results = await play(ctx, games, rng, base, judge)
        metrics.update(rounds=r + 1.0, games=float(base + len(games)))
        metrics["unparsable"] += sum(not parsed for _, parsed in results)
        return [i for g, (winner, _) in zip(games, results, strict=True) for i in g if i != winner]

    async def _judge(
        self,
        ctx: RunContext,
        problem: Problem,
        candidates: list[Trace],
        game: list[int],
        fallback: random.Random,
        r: int,
        call: int,
    ) -> tuple[int, bool]:
        """One game's winner (a candidate index) and whether the verdict named it."""
        cfg = self.config
        prompt = judge_prompt(
            cfg.template, problem.question, [shown(candidates[i], cfg.view, ctx) for i in game]
        )
        parents = [candidates[i].id for i in game]
        trace = await read(ctx, prompt, cfg, parents=parents, label=f"round{r}/game", call=call)
        number = last_number(VERDICT, trace.text) if trace.is_ok else None
        index, parsed = pick(None if number is None else number - 1, len(game), fallback)
        trace.meta.update(round=r, read=game, pick=game[index], parsed=parsed)
        return game[index], parsed
