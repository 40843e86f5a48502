"""LLM judge: ask a model (the run's backend) whether two partial solutions end in the same answer.

Every pair is one judge trace (``kind="judge"``), all sent at once, so their tokens and time
are accounted apart from the samples. The score is P(yes) read from the chosen first token's
log-probability (greedy decoding): p if it says yes, 1 - p if it says no. The contract's
``top_logprobs`` carry no token strings, so the alternatives cannot be read directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paragen import RunContext
from paragen.errors import ConfigError
from paragen.types import Trace

PROMPT = (
    "Two students started the same problem. Here is the beginning of each one's work.\n\n"
    "Problem: {question}\n\nStudent A:\n{a}\n\nStudent B:\n{b}\n\n"
    "Will they end with the same final answer? Reply with one word: yes or no."
)


def yes_probability(trace: Trace) -> float:
    """P(yes) from the judge trace's first token; 0.5 when it said neither."""
    word = trace.text.strip().lower()
    if not trace.is_ok or not word:
        return 0.5
    p = math.exp(trace.logprobs[0]) if trace.logprobs else 1.0
    if word.startswith("yes"):
        return p
    if word.startswith("no"):
        return 1.0 - p
    return 0.5


class LLMJudge:
    """Yes/no same-answer judgment from any backend with logprobs, through the run's context."""

    name = "llm"

    def __init__(self, max_chars: int = 1500, max_tokens: int = 2) -> None:
        self.max_chars = max_chars
        self.max_tokens = max_tokens

    async def same_answer(
        self, pairs: Sequence[tuple[str, str]], ctx: RunContext | None = None
    ) -> list[float]:
        if ctx is None:
            raise ConfigError("the llm judge needs a run context (it samples through the run's backend)")
        if not pairs:
            return []
        cut = self.max_chars
        requests = [
            ctx.request(
                messages=[
                    {
                        "role": "user",
                        "content": PROMPT.format(question=ctx.problem.question, a=a[:cut], b=b[:cut]),
                    }
                ],
                max_tokens=self.max_tokens,
                temperature=0.0,
                logprobs=ctx.capabilities.logprobs,
            )
            for a, b in pairs
        ]
        traces: dict[int, float] = {}
        order: list[int] = []
        async with ctx.fanout(requests, label="judge", kind="judge") as fan:
            order = [t.id for t in fan.traces]
            async for trace in fan:
                traces[trace.id] = yes_probability(trace)
        return [traces.get(i, 0.5) for i in order]
