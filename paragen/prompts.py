"""Default prompts (paragen's own wording), and prompt templates a run may put in their place.

Strategies build their chat with :func:`solve_messages`. A :class:`PromptTemplate` (a system
text or none, and a user text holding ``{problem}``) replaces paragen's wording for everything
run inside :func:`using_template`: the eval harness sets it around a sweep, so every strategy
that asks with :func:`solve_messages` asks in the template's words. A strategy that passes its
own ``system`` (NoThinking's direct answer) keeps it: that prompt is part of its method.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from paragen.types import ChatMessage

MATH_SYSTEM = (
    "You are a careful problem solver. Think step by step, check your work, and write the final "
    "answer as \\boxed{ANSWER} at the end."
)
PROBLEM = "{problem}"
"""Where a template's user text takes the problem (replaced as text: a problem's own braces stay)."""


@dataclass(frozen=True)
class PromptTemplate:
    """A chat prompt: an optional system message and a user message holding ``{problem}``."""

    name: str
    user: str
    system: str | None = None
    source: str = ""  # where the wording comes from (a URL and path), shown in run.json

    def messages(self, question: str) -> list[ChatMessage]:
        messages = [] if self.system is None else [ChatMessage(role="system", content=self.system)]
        messages.append(ChatMessage(role="user", content=self.user.replace(PROBLEM, question)))
        return messages


PARAGEN = PromptTemplate(name="paragen", user=PROBLEM, system=MATH_SYSTEM, source="paragen")
"""paragen's own wording: what :func:`solve_messages` asks when no template is in use."""

_TEMPLATE: contextvars.ContextVar[PromptTemplate | None] = contextvars.ContextVar(
    "paragen_prompt_template", default=None
)


class _Default(enum.Enum):
    SYSTEM = "the template's system text"


def solve_messages(question: str, *, system: str | _Default | None = _Default.SYSTEM) -> list[ChatMessage]:
    """Chat messages asking for a worked solution with a boxed final answer.

    Without ``system``: the template in use (see :func:`using_template`), else paragen's own.
    With it: that system text (None: no system message) and the bare question.
    """
    template = (
        (_TEMPLATE.get() or PARAGEN) if isinstance(system, _Default) else PromptTemplate("", PROBLEM, system)
    )
    return template.messages(question)


@contextmanager
def using_template(template: PromptTemplate | None) -> Iterator[None]:
    """Ask in ``template``'s words inside this block (tasks started inside it inherit it)."""
    token = _TEMPLATE.set(template)
    try:
        yield
    finally:
        _TEMPLATE.reset(token)
