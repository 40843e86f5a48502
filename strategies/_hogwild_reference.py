"""The ``reference`` protocol of ``hogwild``: the structure of the Hogwild! reference code's prompts.

Rodionov et al. (2025) put their whole instruction into the user turn: rules of collaboration,
a worked example that shows the cache exactly as a worker will see it, a list of ways to
collaborate, then the problem. Their collaboration nudge counts every worker's tokens, their
finisher re-encodes the flattened text of all workers into a fresh cache, and a boxed answer
anywhere in the workers' text at the budget's end is the answer. This module holds paragen's own
wording of those texts (written from the method's description, not copied) laid out as the
reference's cache holds them; the protocol's other rules live in the strategy's config
(``HogwildConfig.protocol``) and in ``_hogwild_rules``.
"""

from __future__ import annotations

from strategies._hogwild_prompts import HogwildPrompts

_RULES = (
    "# Reasoning together\n\n"
    "You are one of {count} assistants ({names}) and you will solve a problem together. All of you "
    "write at the same time, and each of you sees what the others write the moment they write it. "
    "Work together and never do the same work twice.\n\n"
    "- Your work is cut into numbered steps such as **{first} [4]:**. A step ends with a blank line. "
    'The team\'s finished steps appear under "### Past steps", in the order they were finished.\n'
    '- Under "### Work in progress (others)" you see the steps the other assistants are writing '
    'right now, each cut off with "<...>" where they currently are. Under "### Work in progress '
    '(own)" you continue your own step.\n'
    "- If you find that you are doing what another assistant has already done or is doing right now, "
    'stop at once and say so (for example "Wait, {second} is already doing this, so I will ...") '
    "and pick another part of the work.\n"
    # No literal box here: a small model copies "\\boxed{answer}" from its prompt as its answer.
    "- Any one of you may write the team's **final** answer, boxed with \\boxed, once it is checked; "
    "the work ends there.\n\n"
)

_EXAMPLE = (
    "# Example\n\n"
    "Here is how the team's text looks in the middle of a problem (how many positive divisors does "
    "360 have?), as Bob would see it:\n\n"
    "<example>\n"
    "### Past steps\n\n"
    "**Alice [1]:** Hi, I'm Alice. Here is how we can split this: I will factor 360, Bob can count "
    "the divisors of the factored form.\n\n"
    "**Bob [1]:** Hi, I'm Bob. Sounds good, I will wait for the factors and then count.\n\n"
    "**Alice [2]:** 360 = 8 * 45 = 2^3 * 3^2 * 5.\n\n"
    "### Work in progress (others)\n\n"
    "**Alice [3]:** While Bob counts, I will check by listing the small divisors: 1, 2, 3, 4, 5, 6, "
    "8, 9, 10<...>\n\n"
    "### Work in progress (own)\n\n"
    "**Bob [2]:** With 2^3 * 3^2 * 5 the count is (3 + 1)(2 + 1)(1 + 1) = 24.\n"
    "</example>\n\n"
)

_HOW_TO = (
    "# How to collaborate\n\n"
    "- Plan first: agree on the approach before computing.\n"
    "- Split the work: take different sub-problems, cases or ranges.\n"
    "- Try alternatives: when the approach is unclear, each of you can try a different one.\n"
    "- Check each other: verify a result someone else found rather than redo it.\n"
    "- Say what you are doing: announce what you start, so the others can choose something else.\n"
    "- React to the others: use their results as soon as they appear.\n"
    "- Change course: if your line of work is redundant or wrong, drop it and say so.\n\n"
)

_TASK = (
    "# Solve the following problem\n\n"
    "{names}, you will now solve the next problem together. Keep track of who does what and talk to "
    "each other so that no work is done twice."
)

# The view as the reference's cache holds it: the prompt, then the finished steps with no header of
# their own, then "<blank line>### Work in progress (others)<blank line>", each other worker's step
# ended by "<...>" and a blank line, "### Work in progress (own)" and a blank line, the worker's step.
# The finisher reads the same text (the flattened run).
REFERENCE_PROMPTS = HogwildPrompts(
    system=_RULES + _EXAMPLE + _HOW_TO + _TASK,
    system_in_user=True,
    past_header="",
    others_header="\n\n### Work in progress (others)\n\n",
    cut_marker="<...>\n\n",
    own_header="### Work in progress (own)\n\n",
    opener_prefix="",
    nudge="Quick check: is my current work already done or being done by someone else? (yes/no): ",
)

__all__ = ["REFERENCE_PROMPTS"]
