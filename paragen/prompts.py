"""Default prompts (paragen's own wording); strategies with prompts of their own keep them nearby."""

from __future__ import annotations

from paragen.types import ChatMessage

MATH_SYSTEM = (
    "You are a careful problem solver. Think step by step, check your work, and write the final "
    "answer as \\boxed{ANSWER} at the end."
)


def solve_messages(question: str, *, system: str | None = MATH_SYSTEM) -> list[ChatMessage]:
    """Chat messages asking for a worked solution with a boxed final answer."""
    messages = [] if system is None else [ChatMessage(role="system", content=system)]
    messages.append(ChatMessage(role="user", content=question))
    return messages
