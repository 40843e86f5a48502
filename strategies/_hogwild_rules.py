"""When a Hogwild! step ends and what counts as the team's answer: paragen's rules and the reference's.

Both sides cut a worker's text into steps at a blank line that follows the end of a sentence. They
differ in three ways, each chosen by a :class:`StepRule`:

- the sentence ends: the reference code (eqimp/hogwild_llm, ``MathFormatting``) lists sixteen
  characters; paragen's own list has the nine common ones.
- code blocks: paragen does not end a step inside an open ````` block (a blank line in code is
  no step end); the reference has no such rule.
- the blank line: the reference checks only when the newest token holds a whole blank line
  (it looks for the blank-line token in the newest token), so a blank line written as two
  one-newline tokens ends no step; paragen checks whenever the newest text completed one.

The answer: paragen takes any ``\\boxed{}``; the reference (``find_last_valid_result`` with its
default ``extract_result=float``) takes the rightmost box whose text, up to the first ``}``,
Python's ``float`` parses, so a fraction or an expression never ends the run nor answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from paragen.answers import last_boxed

STEP_SEPARATOR = "\n\n"
# paragen: colons, commas and semicolons do not end sentences, so a list that follows them does
# not cut the step.
SENTENCE_ENDS = (".", "?", "!", "…", "。", "‽", "؟", "।", "۔")
# The reference's list: paragen's and seven more (double danda, Tibetan shad, Mongolian full stop,
# Armenian full stop, Georgian paragraph separator, pilcrow, floral heart).
REFERENCE_SENTENCE_ENDS = (*SENTENCE_ENDS, "॥", "།", "᠃", "։", "჻", "¶", "❧")

AnswerRule = Literal["boxed", "number"]
_BOX = "\\boxed{"


@dataclass(frozen=True, slots=True)
class StepRule:
    """What ends a step (see the module's note)."""

    sentence_ends: tuple[str, ...]
    code_blocks: bool  # no step ends inside an open ``` block
    whole_blank_line: bool  # the newest text must hold the whole blank line (a token that contains it)


PARAGEN_STEPS = StepRule(SENTENCE_ENDS, code_blocks=True, whole_blank_line=False)
REFERENCE_STEPS = StepRule(REFERENCE_SENTENCE_ENDS, code_blocks=False, whole_blank_line=True)
STEP_RULES = {"paragen": PARAGEN_STEPS, "reference": REFERENCE_STEPS}


def ends_step(text: str, new_chars: int, rule: StepRule = PARAGEN_STEPS) -> int | None:
    """Where the step ends if the last ``new_chars`` characters of ``text`` completed a step boundary.

    Returns the index the step's text ends at (it is ``text[:index]``), or None. paragen ends it
    before the blank line (which opens the next step); the reference after the newest token (its
    finished step holds every token up to that one, the blank line and anything after it).
    """
    sep = text.rfind(STEP_SEPARATOR)
    newest = len(text) - new_chars
    if sep < 0 or (sep < newest if rule.whole_blank_line else sep + len(STEP_SEPARATOR) <= newest):
        return None
    before = text[:sep].rstrip()
    if not before.endswith(rule.sentence_ends):
        return None
    if rule.code_blocks and before.count("```") % 2 == 1:
        return None
    return len(text) if rule.whole_blank_line else sep


def numeric_boxed(text: str) -> str | None:
    """The rightmost box whose text up to the first ``}`` after it is a number to Python's ``float``.

    The reference reads the answer this way: no brace matching (``\\boxed{\\frac{1}{2}}`` reads
    ``\\frac{1``, no number), and a box that is no number gives way to the one before it.
    """
    while (start := text.rfind(_BOX)) >= 0:
        end = text.find("}", start)
        if end >= 0:
            found = text[start + len(_BOX) : end]
            try:
                float(found)
            except ValueError:
                pass
            else:
                return found.strip()
        text = text[:start]
    return None


def answer_in(text: str, rule: AnswerRule) -> str | None:
    """The answer ``text`` holds under the rule: the last box, or the last box that is a number."""
    return last_boxed(text) if rule == "boxed" else numeric_boxed(text)


__all__ = [
    "PARAGEN_STEPS",
    "REFERENCE_SENTENCE_ENDS",
    "REFERENCE_STEPS",
    "SENTENCE_ENDS",
    "STEP_RULES",
    "STEP_SEPARATOR",
    "AnswerRule",
    "StepRule",
    "answer_in",
    "ends_step",
    "numeric_boxed",
]
