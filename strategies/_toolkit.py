"""Small helpers shared by the published strategies (FFS, PDR/SR, DeepPrune, DeepConf, ...).

Everything here goes through :class:`~paragen._context.RunContext`; nothing touches a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from paragen import RunContext
from paragen.answers import ExtractMode, answer_key, extract_answer, majority_vote, vote_counts
from paragen.prompts import solve_messages
from paragen.reasoning import ThinkFormat, after_prefill, whole_text
from paragen.types import ChatMessage, GenerateRequest, StrategyResult, Trace


def overrides(
    temperature: float | None = None, top_p: float | None = None, max_tokens: int | None = None
) -> dict[str, Any]:
    """Sampling overrides from a config: None means "keep the run's default"."""
    found = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    return {key: value for key, value in found.items() if value is not None}


def solve_request(ctx: RunContext, question: str, *, n: int = 1, **params: Any) -> GenerateRequest:
    """The default "solve this, box the answer" chat request."""
    return ctx.request(messages=solve_messages(question), n=n, **params)


def prefixed_request(ctx: RunContext, question: str, opener: str, **params: Any) -> GenerateRequest:
    """A solve request whose assistant reply is prefilled with ``opener`` (continued by the model)."""
    messages = [*solve_messages(question), ChatMessage(role="assistant", content=opener)]
    return ctx.request(messages=messages, continue_final=True, **params)


def written_text(trace: Trace, so_far: str, fmt: ThinkFormat) -> str:
    """The raw text a continuation wrote, thinking delimiters included: what the next continuation
    prefills after ``so_far``. The opener is written once: where ``so_far`` left none open, the
    continuation opened it."""
    if trace.thinking == "none":
        return trace.text
    return after_prefill(whole_text(trace, fmt), so_far, fmt)


def annotate(trace: Trace, mode: ExtractMode = "auto") -> Trace:
    """Fill ``trace.answer`` from its text (NO_ANSWER for traces that did not finish ok)."""
    trace.answer = extract_answer(trace.text, mode) if trace.is_ok else None
    return trace


def vote_finish(
    ctx: RunContext,
    traces: Sequence[Trace],
    *,
    weights: Sequence[float] | None = None,
    metrics: dict[str, float] | None = None,
) -> StrategyResult:
    """Majority (optionally weighted) vote over ``traces``' answers; text = the first trace giving it."""
    answers = [t.answer for t in traces]
    winner = majority_vote(answers, weights)
    chosen = next((t for t in traces if t.answer == winner), None) if winner is not None else None
    counts = vote_counts(answers)
    found = {  # the winner's own count: under a weighted vote it need not be the most frequent
        "votes_for_winner": float(counts.get(answer_key(winner), 0) if winner is not None else 0),
        "distinct_answers": float(len(counts)),
    }
    text, reasoning = (None, None) if chosen is None else (chosen.text, chosen.reasoning)
    return ctx.finish(winner, text=text, reasoning=reasoning, metrics={**found, **(metrics or {})})
