"""Prompts and step rules shared by ``hogwild`` and ``hogwild_text``: pure data and functions.

The wording is paragen's own, written after the method of Rodionov et al. (2025): a system
prompt that tells the workers they write at the same time and can read each other, step headers
"**Alice [3]:**", a periodic question asking a worker whether it repeats someone's work, and a
finisher that asks for the boxed answer when time is up.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from paragen.answers import extract_answer, last_boxed
from strategies._hogwild_rules import SENTENCE_ENDS, STEP_SEPARATOR, AnswerRule, ends_step, numeric_boxed

NAMES = ("Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi")

_STEP_HEADER = re.compile(r"\*\*\w+ \[\d+\]:\*\*")  # "**Alice [3]:**", whose number is no answer


class HogwildPrompts(BaseModel):
    """Every text the strategy writes into the workers' cache (all configurable)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str = (
        "# Working as a team\n\n"
        "You are one of {count} assistants ({names}) solving one problem together. You all write at "
        "the same time, and every one of you can read what the others are writing while they write it.\n\n"
        "- Your writing is cut into numbered steps such as **{first} [3]:**. Finished steps of the whole "
        'team are shown under "### Past steps". The steps the others are still writing are shown under '
        '"### Work in progress (others)", cut off where they are now, and your own under '
        '"### Work in progress (own)".\n'
        "- Do not do work that someone else has already done or is doing. If you notice that you are "
        'repeating another assistant, say so (for example: "{second} is already computing this, so I '
        'will check it instead.") and switch to something else at once.\n'
        "- Share the work: agree on a plan, take different parts or different methods, and check each "
        "other's results.\n"
        "- Keep each step short and end it with a blank line.\n"
        "- When the team is sure, any one of you may give the final answer, boxed with \\boxed.\n\n"
        "# The problem\n\n"
        "{names}: solve the problem below together. Keep track of who does what, and do not do the "
        "same work twice."
    )
    system_in_user: bool = False  # the reference passes its instructions in the user turn, before the problem
    past_header: str = "### Past steps"
    others_header: str = "\n\n### Work in progress (others)"
    own_header: str = "\n\n### Work in progress (own)"
    cut_marker: str = " <...>"
    step_header: str = "**{name} [{step}]:** "  # after the token that ended the previous step
    opener_prefix: str = STEP_SEPARATOR  # before the first step's header (the reference: none)
    first_opener: str = "Hi, I'm {name}. Here is how we could split the work:"
    other_opener: str = "Hi, I'm {name}."
    nudge: str = "Is another assistant already doing what I am about to do? (yes/no): "
    finisher: str = (
        "\n\nTime is up, so I must answer now. Putting together everything the team has found, "
        "the final answer is \\boxed{"
    )

    def system_text(self, count: int) -> str:
        names = list(NAMES[:count])
        listed = ", ".join(names[:-1]) + f" and {names[-1]}" if count > 1 else names[0]
        second = names[1] if count > 1 else names[0]
        return self.system.format(count=count, names=listed, first=names[0], second=second)

    def messages(self, question: str, count: int) -> list[dict[str, str]]:
        """The chat messages of the shared prompt: the instructions in the system or the user turn."""
        system = self.system_text(count)
        if self.system_in_user:
            return [{"role": "user", "content": f"{system}\n\n{question}"}]
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]

    def opener(self, worker: int) -> str:
        name = NAMES[worker]
        opener = self.first_opener if worker == 0 else self.other_opener
        return self.opener_prefix + self.step_header.format(name=name, step=1) + opener.format(name=name)

    def header(self, worker: int, step: int, *, nudge: bool) -> str:
        return self.step_header.format(name=NAMES[worker], step=step) + (self.nudge if nudge else "")


def finisher_answer(
    opening: str, finisher_text: str, transcript: str, rule: AnswerRule = "boxed"
) -> str | None:
    """The finisher's answer.

    ``"boxed"`` (paragen): its boxed answer; else the last number it wrote; else the team's text's
    answer (a small model may close the box empty or drift off, copying layout headers; the
    fallback reads the transcript the way ``single`` reads its sample, step headers removed).
    ``"number"`` (the reference): the last box that is a number in the whole text, ``transcript``
    (the text the finisher continued), its opening and what it wrote; else none.
    """
    if rule == "number":
        return numeric_boxed(transcript + opening + finisher_text)
    found = last_boxed(opening + finisher_text) or extract_answer(finisher_text, "last_number")
    return found if found is not None else extract_answer(_STEP_HEADER.sub("", transcript))


__all__ = ["NAMES", "SENTENCE_ENDS", "STEP_SEPARATOR", "HogwildPrompts", "ends_step", "finisher_answer"]
