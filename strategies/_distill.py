"""PDR's distill operators: turn a round's drafts into bounded workspaces for the next round.

Operators (Madaan et al., arXiv 2510.01123): ``global_summary`` (one model-written summary
shared by all), ``shared_topk`` (the same k best drafts for everyone), ``per_sample_topk``
(each next-round sample its own k drafts), ``random_k`` (k drafts drawn at random per sample).
"Best" is scored by answer agreement (how many other drafts reach the same answer) unless a
draft ranker ``"module:function"`` is given (PDR's ``scorer`` option). Every workspace is
bounded to ``kappa`` tokens, checked with the backend's token count, because a bounded context
is the point of the method.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from paragen import RunContext
from paragen.answers import answer_key
from paragen.registry import resolve_function

DraftRanker = Callable[[str, Sequence[str], Sequence[str | None]], Sequence[float]]
"""(question, draft texts, draft answers) -> one score per draft; higher is better."""


@dataclass(slots=True)
class Draft:
    """One candidate of a round: its text, answer, the traces behind it and its paper costs."""

    text: str
    answer: str | None
    trace_ids: list[int] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    all_tokens: int | None = None  # input + output of every call behind it (None = just ``cost``)

    @property
    def cost(self) -> int:
        """Input + output tokens on the draft's accepted path."""
        return self.input_tokens + self.output_tokens

    @property
    def total_cost(self) -> int:
        return self.cost if self.all_tokens is None else self.all_tokens


# -- pure parts ----------------------------------------------------------------------------------


def agreement_scores(answers: Sequence[str | None]) -> list[float]:
    """Fraction of the other drafts that reach the same answer (NO_ANSWER scores 0)."""
    keys = [None if a is None else answer_key(a) for a in answers]
    others = max(1, len(keys) - 1)
    return [0.0 if key is None else (keys.count(key) - 1) / others for key in keys]


def top_k(scores: Sequence[float], k: int, tiebreak: Sequence[float] | None = None) -> list[int]:
    """Indices of the ``k`` best scores; ties by ``tiebreak`` (higher first), then by index."""
    order = tiebreak or [0.0] * len(scores)
    return sorted(range(len(scores)), key=lambda i: (-scores[i], -order[i], i))[:k]


def shared_topk(scores: Sequence[float], k: int, m: int, rng: random.Random) -> list[list[int]]:
    return [top_k(scores, k)] * m


def per_sample_topk(scores: Sequence[float], k: int, m: int, rng: random.Random) -> list[list[int]]:
    """Each sample gets the top k with its own random tie-break, so equally good drafts are spread."""
    return [top_k(scores, k, [rng.random() for _ in scores]) for _ in range(m)]


def random_k(scores: Sequence[float], k: int, m: int, rng: random.Random) -> list[list[int]]:
    """k drafts drawn without replacement for each sample ("bootstrapped" small workspaces)."""
    return [sorted(rng.sample(range(len(scores)), min(k, len(scores)))) for _ in range(m)]


SELECTORS: dict[str, Callable[[Sequence[float], int, int, random.Random], list[list[int]]]] = {
    "shared_topk": shared_topk,
    "per_sample_topk": per_sample_topk,
    "random_k": random_k,
}


def fit_to_budget(pieces: Sequence[str], counts: Sequence[int], kappa: int) -> list[str]:
    """Cut pieces (keeping their ends, where answers are) so their token counts sum to about ``kappa``.

    Short pieces keep all their tokens; the rest share what is left evenly. Cuts are by
    character ratio, so the caller re-counts and shrinks further if the tokenizer disagrees.
    """
    budget, out = kappa, list(pieces)
    order = sorted(range(len(pieces)), key=lambda i: counts[i])
    for rank, i in enumerate(order):
        share = budget // (len(order) - rank)
        if counts[i] > share:
            keep = int(len(pieces[i]) * share / max(1, counts[i]))
            out[i] = pieces[i][len(pieces[i]) - keep :] if keep > 0 else ""
        budget -= min(counts[i], share)
    return out


def render(drafts: Sequence[str]) -> str:
    """The workspace text shown to the next round."""
    return "\n\n".join(f"Attempt {i + 1}:\n{text.strip()}" for i, text in enumerate(drafts))


def load_draft_ranker(spec: str | None) -> DraftRanker | None:
    """The user's draft ranker (PDR's ``scorer`` option, a ``module:function``); None = agreement."""
    if spec is None:
        return None
    ranker: DraftRanker = resolve_function(spec, "pdr draft scorer")
    return ranker


# -- operators that use the context ----------------------------------------------------------------


async def bounded(ctx: RunContext, pieces: Sequence[str], kappa: int) -> str:
    """``render(pieces)`` cut until the backend counts at most ``kappa`` tokens."""
    counts = [await ctx.count_tokens(p) for p in pieces]
    fitted = fit_to_budget(pieces, counts, kappa)
    text = render(fitted)
    while fitted and await ctx.count_tokens(text) > kappa:
        # Headers and joins cost tokens too: trim 10% (at least a character) from each front; once
        # nothing is left to trim, the headers alone are over kappa, so show fewer attempts.
        fitted = [p[max(1, len(p) // 10) :] for p in fitted] if any(fitted) else fitted[1:]
        text = render(fitted)
    return text


SUMMARY_PROMPT = (
    "Below are several attempts at the same problem. Write a short briefing for someone who will "
    "solve it next: which results the attempts agree on, where they disagree, intermediate values "
    "worth reusing, and what still needs checking. Do not solve the problem yourself.\n\n"
    "Problem: {question}\n\n{attempts}"
)


async def global_summary(
    ctx: RunContext, question: str, drafts: Sequence[Draft], kappa: int
) -> tuple[str, Draft]:
    """One summary written by the model, bounded to ``kappa`` tokens; returns it and its call."""
    attempts = render([d.text for d in drafts])
    prompt = SUMMARY_PROMPT.format(question=question, attempts=attempts)
    parents = [i for d in drafts for i in d.trace_ids]
    request = ctx.request(messages=[{"role": "user", "content": prompt}], max_tokens=kappa)
    trace = await ctx.sample(request, label="distill", parents=parents)
    call = Draft(trace.text, None, [trace.id], trace.prompt_tokens, trace.completion_tokens)
    return await bounded(ctx, [trace.text], kappa), call
