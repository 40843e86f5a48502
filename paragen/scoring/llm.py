"""The LLM-as-verifier: the generator itself asked whether a step (or an answer) is correct.

No reward model needed, so every backend that returns logprobs can search. One greedy token is
decoded after a verification prompt; the score is the probability of "correct" read from its
log-probability: ``p`` when the token is a yes, ``1 - p`` when it is a no (the rest of the mass
is taken to be the other word), and 0.5 (no opinion) for any other token. Weak on a small model,
but a real scorer with a real cost: its prompt and its token are counted as score tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paragen.backends.base import Capabilities
from paragen.errors import ConfigError
from paragen.types import ChatMessage, Trace

VERIFY_STEP = (
    "Below is a math problem and a solution in progress.\n\nProblem:\n{question}\n\n"
    "Solution so far:\n{solution}\n\nIs the last step of this solution correct? "
    "Answer with one word: Yes or No."
)
VERIFY_ANSWER = (
    "Below is a math problem and a complete solution.\n\nProblem:\n{question}\n\n"
    "Solution:\n{solution}\n\nIs this solution correct? Answer with one word: Yes or No."
)
YES = frozenset({"yes", "correct", "true"})
NO = frozenset({"no", "incorrect", "false", "wrong"})
NO_OPINION = 0.5


def check_logprobs(capabilities: Capabilities) -> None:
    """The LLM-as-verifier reads the verdict's log-probability: refuse a backend that returns none."""
    if not capabilities.logprobs:
        raise ConfigError(
            "the LLM-as-verifier needs a backend that returns logprobs",
            hint="use the engine, vLLM or a server with logprobs, or set verifier to a reward model",
        )


def verify_messages(question: str, steps: Sequence[str], *, whole: bool) -> list[ChatMessage]:
    """The verification prompt: the steps so far (their last one is rated), or a whole solution."""
    template = VERIFY_ANSWER if whole else VERIFY_STEP
    solution = "\n\n".join(s.strip() for s in steps)
    return [ChatMessage(role="user", content=template.format(question=question, solution=solution))]


def verdict_score(trace: Trace) -> float:
    """P(correct) from the verifier's one greedy token (see the module docstring)."""
    word = trace.text.strip().strip(".,!*:").lower()
    if not trace.is_ok or not trace.logprobs or not word:
        return NO_OPINION
    p = math.exp(trace.logprobs[0])
    if word in YES:
        return p
    if word in NO:
        return 1.0 - p
    return NO_OPINION
