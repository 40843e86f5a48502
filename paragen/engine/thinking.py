"""Thinking budgets: a sequence that has thought ``budget`` tokens is made to close its thinking.

A sequence thinks from its start when its prompt left the family's opening delimiter open (a chat
template that opens it, a raw prompt or a prefilled reply ending inside a thought) or when the
family's template always opens it (``think_open``); otherwise it thinks once its own output opens
with the delimiter (leading whitespace aside), as :func:`paragen.reasoning.split_thinking` reads
it. The budget counts the tokens generated after the opening delimiter; when ``budget`` of them
came without the closing delimiter, the closing delimiter's tokens are forced as the next tokens
(each the only choice of its step, as vLLM's ``thinking_token_budget`` does), and sampling goes
on as the answer. Thinking the prompt already holds does not count: the budget bounds what this
request generates. Delimiters are found in the decoded text, not as token ids, so a family whose
delimiters are several tokens (or tokenise differently in context) is read right.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from paragen.reasoning import DELIMITERS, ThinkFormat, leaves_open

Phase = Literal["unknown", "thinking", "done"]


@dataclass(frozen=True, slots=True)
class ThinkingSpec:
    """A request's budget and its family's delimiters (shared by the request's sequences)."""

    budget: int
    open: str
    close: str
    close_ids: tuple[int, ...]  # the closing delimiter as the tokenizer writes it
    opened: bool  # the thinking is open at the start of the output


class ThinkingBudget:
    """One sequence's place in its thinking: fed every token's decoded text so far (``observe``),
    it says which token must come next (``forced``), if any."""

    __slots__ = ("_scanned", "_start", "count", "pending", "phase", "spec")

    def __init__(self, spec: ThinkingSpec) -> None:
        self.spec = spec
        self.phase: Phase = "unknown"
        self.count = 0  # thinking tokens generated so far
        self.pending: list[int] = []  # closing tokens still to force
        self._start = 0  # where the thought begins in the output's text
        self._scanned = 0  # text already searched for the closing delimiter
        if spec.opened:
            self._begin(0)

    def forced(self) -> int | None:
        """The token the next step must produce (None: sample freely)."""
        return self.pending[0] if self.pending else None

    def observe(self, text: str) -> None:
        """After a token was appended: ``text`` is the sequence's output decoded so far."""
        if self.pending:  # the step produced the forced token
            del self.pending[0]
            if not self.pending:
                self.phase = "done"
        elif self.phase == "unknown":
            self._look_for_opening(text)
        elif self.phase == "thinking":
            self._think(text)

    def _look_for_opening(self, text: str) -> None:
        opening, written = self.spec.open, text.lstrip()
        if written.startswith(opening):
            self._begin(len(text) - len(written) + len(opening))
        elif not opening.startswith(written):  # the output cannot open a thought any more
            self.phase = "done"

    def _think(self, text: str) -> None:
        close = self.spec.close
        if text.find(close, max(self._start, self._scanned - len(close))) >= 0:
            self.phase = "done"  # the model closed its thinking itself
            return
        self._scanned = len(text)
        self.count += 1
        if self.count >= self.spec.budget:
            self.pending = list(self.spec.close_ids)

    def _begin(self, start: int) -> None:
        self.phase, self._start, self._scanned = "thinking", start, start
        if self.spec.budget == 0:
            self.pending = list(self.spec.close_ids)


def thinking_spec(
    tokenizer: Any, prompt_ids: list[int], budget: int, fmt: ThinkFormat
) -> ThinkingSpec | None:
    """The budget of a request whose rendered prompt is ``prompt_ids``, for a family that thinks in
    ``fmt`` (None where it has no ``<think>`` delimiters to force)."""
    if fmt not in ("think", "think_open"):
        return None
    marks = DELIMITERS[fmt]
    prompt: str = tokenizer.decode(prompt_ids)
    opened = fmt == "think_open" or leaves_open(prompt, fmt)
    close_ids = tuple(tokenizer(marks.close, add_special_tokens=False)["input_ids"])
    return ThinkingSpec(budget, marks.open, marks.close, close_ids, opened)
