"""The early-stop finisher, for the baselines Hogwild! is measured against.

Rodionov et al. (2025) give their sequential baseline the same finisher as their workers: when
the budget runs out before a boxed answer, the text so far is continued with a short "time is
up, the answer is \\boxed{" prompt and decoded greedily. ``single`` and ``majority`` take it
with ``finisher=true``, so a sweep can compare them with ``hogwild`` under one protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from paragen import RunContext, StrategyConfig
from paragen.answers import last_boxed
from paragen.reasoning import whole_text
from paragen.types import ChatMessage, TokenCount, Trace
from strategies._hogwild_prompts import HogwildPrompts, finisher_answer

FINISHER_TEXT = HogwildPrompts().finisher  # the same words as hogwild's, in either protocol


class FinisherFields(StrategyConfig):
    """Config fields of a strategy that can end a cut-off sample with the finisher."""

    finisher: bool = Field(
        default=False, description="a sample cut off without a boxed answer gets a greedy finisher"
    )
    finisher_tokens: TokenCount = Field(default=16, description="greedy tokens the finisher may write")


def check_finisher(ctx: RunContext, config: FinisherFields) -> None:
    """Refuse the finisher up front on a backend that cannot continue a prefilled reply."""
    if config.finisher:
        ctx.require_continuation(
            "the finisher needs a backend that continues a prefilled reply", instead="set finisher=false"
        )


def needs_finisher(trace: Trace) -> bool:
    """A sample the budget cut off before it boxed an answer."""
    return trace.is_ok and trace.is_truncated and last_boxed(trace.text) is None


async def run_finisher(
    ctx: RunContext, messages: Sequence[ChatMessage], trace: Trace, max_tokens: int
) -> Trace:
    """Continue ``trace``'s text with the finisher prompt, greedily; the finisher's answer is returned
    on its trace (its tokens are counted like any sample's; it follows ``trace`` on the critical path).
    A reasoning model's sample goes on from its whole output, its thinking included (and closed, if
    it was cut off while thinking: the finisher writes the answer, after the thinking)."""
    so_far = whole_text(trace, ctx.capabilities.thinking, close=True)
    reply = ChatMessage(role="assistant", content=so_far + FINISHER_TEXT)
    request = ctx.request(
        messages=[*messages, reply], continue_final=True, temperature=0.0, max_tokens=max_tokens
    )
    finished = await ctx.sample(request, label="finisher", parents=[trace.id])
    finished.answer = finisher_answer(FINISHER_TEXT, finished.text, trace.text) if finished.is_ok else None
    return finished


__all__ = ["FINISHER_TEXT", "FinisherFields", "check_finisher", "needs_finisher", "run_finisher"]
