"""What the read-the-samples strategies share (GenSelect, the knockout tournament, HeavySkill).

Each samples candidates, then a reading pass shows a model some of them and asks it to pick one
or to write a better answer. Here: the common config fields, how a candidate is shown (its final
part, or its whole text with the thinking), how the shown candidates are listed, how an index is
read out of a verdict, and the reading call itself, which may go to a second model (``reader``:
the name of a backend given to the Orchestrator) while its trace stays in the run's ledger.

A reading call is a trace of kind "sample": its tokens are part of ``total_tokens`` and of the
critical path (its parents are the candidates it read), as RSA's and PDR's aggregation calls
are, so a comparison with majority voting at the same ``n`` charges the reading for what it costs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from pydantic import Field

from paragen import RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.reasoning import whole_text
from paragen.types import TokenCount, Trace
from strategies._toolkit import annotate, overrides, solve_request

View = Literal["final", "whole"]


class ReadingConfig(StrategyConfig):
    """Fields every read-the-samples strategy has: how candidates are sampled and how they are read."""

    reader: str | None = Field(
        default=None,
        description="name of a backend given to the Orchestrator (backends={name: ...}) that does the "
        "reading pass; None = the run's own backend",
    )
    view: View = Field(
        default="final",
        description="what the reader sees of a candidate: final = its text after the thinking (the "
        "authors drop everything before </think>); whole = thinking included",
    )
    temperature: float | None = Field(default=None, ge=0, description="candidates; None = run default")
    max_tokens: TokenCount | None = Field(default=None, description="per candidate; None = run default")
    reader_temperature: float | None = Field(
        default=None, ge=0, description="reading pass; None = run default"
    )
    reader_max_tokens: TokenCount | None = Field(default=None, description="reading pass; None = run default")
    seed: int | None = Field(default=None, description="shuffles and fallback picks; None = the run's seed")
    extract: ExtractMode = "auto"


def reading_rng(strategy: str, seed: int | None, problem_id: str) -> random.Random:
    """One stream per (strategy, seed, problem), as RSA's subsets: a seeded run draws the same again."""
    return random.Random(f"{strategy}/{0 if seed is None else seed}/{problem_id}")


def run_seed(ctx: RunContext, seed: int | None) -> int | None:
    """The config's seed, else the run's sampling seed."""
    return seed if seed is not None else ctx.defaults.seed


def shown(trace: Trace, view: View, ctx: RunContext) -> str:
    """A candidate as the reader sees it."""
    if view == "whole":
        return whole_text(trace, ctx.capabilities.thinking).strip()
    return trace.text.strip()


def readable(traces: Sequence[Trace], view: View, ctx: RunContext) -> list[int]:
    """Indices of the candidates worth reading: finished ok with something to show (the tournament
    of NeMo-Skills knocks empty participants out before the first game)."""
    return [i for i, t in enumerate(traces) if t.is_ok and shown(t, view, ctx)]


def listing(texts: Sequence[str], *, name: str, first: int) -> str:
    """The candidates one after another, numbered from ``first`` (``Solution 1``, ...)."""
    return "\n\n".join(f"--- {name} {first + i} ---\n{text}" for i, text in enumerate(texts))


def groups_of(pool: list[int], size: int) -> list[list[int]]:
    """``pool`` cut in order into groups of at most ``size``."""
    return [pool[i : i + size] for i in range(0, len(pool), size)]


def last_number(pattern: re.Pattern[str], text: str) -> int | None:
    """The number in the last match of ``pattern`` (its group 1) in ``text``; None when none matches."""
    found = pattern.findall(text)
    if not found:
        return None
    try:
        return int(str(found[-1]).strip())
    except ValueError:
        return None


def pick(index: int | None, count: int, rng: random.Random) -> tuple[int, bool]:
    """The verdict's 0-based ``index`` when it names one of ``count`` shown candidates, else a
    seeded random one: (pick, whether the verdict was used)."""
    if index is not None and 0 <= index < count:
        return index, True
    return rng.randrange(count), False


async def sample_candidates(ctx: RunContext, question: str, n: int, cfg: ReadingConfig) -> list[Trace]:
    """``n`` independent solutions of ``question`` in one fan-out, each with its answer extracted."""
    request = solve_request(ctx, question, n=n, **overrides(cfg.temperature, None, cfg.max_tokens))
    async with ctx.fanout(request, label="candidates") as fan:
        async for trace in fan:
            annotate(trace, cfg.extract)
        return fan.traces


async def read(
    ctx: RunContext, prompt: str, cfg: ReadingConfig, *, parents: Sequence[int], label: str, call: int
) -> Trace:
    """One reading pass: ``prompt`` as the user's message, on the reader's backend; ``call``
    numbers it so that a seeded run gives every reading call its own sampling seed."""
    params: dict[str, Any] = overrides(cfg.reader_temperature, None, cfg.reader_max_tokens)
    if ctx.defaults.seed is not None:
        params["seed"] = ctx.defaults.seed + 1 + call
    request = ctx.request(messages=[{"role": "user", "content": prompt}], **params)
    trace = await ctx.sample(request, label=label, parents=list(parents), backend=cfg.reader)
    return annotate(trace, cfg.extract)


# One group's contest: (group, its fallback generator, its call number) -> (winner, verdict used).
Contest = Callable[[list[int], random.Random, int], Awaitable[tuple[int, bool]]]


async def play(
    ctx: RunContext, groups: list[list[int]], rng: random.Random, first_call: int, contest: Contest
) -> list[tuple[int, bool]]:
    """Every group of two or more contested at once (group ``g`` as call ``first_call + g``); a group
    of one wins unread. Each group's fallback generator is drawn from ``rng`` before any call runs,
    so the order the calls finish in never changes a seeded run."""
    fallbacks = [random.Random(rng.getrandbits(32)) for _ in groups]
    results = [(group[0], True) for group in groups]

    async def one(g: int) -> None:
        results[g] = await contest(groups[g], fallbacks[g], first_call + g)

    async with ctx.concurrently() as children:
        for g, group in enumerate(groups):
            if len(group) > 1:
                children.start(one, g)
    return results
