"""Hogwild!'s decision rules as its authors' code makes them, transcribed independently of paragen.

Source: eqimp/hogwild_llm, ``formatting.py`` (``MathFormatting``: ``is_end_of_step``,
``should_finish_reasoning``, ``get_final_answer``, ``find_last_valid_result``) and ``generation.py``
(``generate_reasoning_2agents``: the pass loop, the nudge count; ``compile_response_with_s1_finisher``:
the finisher's text). The behaviour is reproduced over token texts (a tokenizer's pieces), not the code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SEP = "\n\n"
# MathFormatting.end_of_step_chars, in its order.
END_OF_STEP_CHARS = (".", "?", "!", "。", "۔", "؟", "।", "॥", "…", "‽", "།", "᠃", "։", "჻", "¶", "❧")


def is_end_of_step(step_tokens: Sequence[str]) -> bool:
    """The newest token must contain the blank-line token; then the step's text before its last
    blank line, stripped, must end with one of the end-of-step characters (no code-block rule)."""
    if SEP not in step_tokens[-1]:
        return False
    text = "".join(step_tokens)
    return text[: text.rindex(SEP)].strip().endswith(END_OF_STEP_CHARS)


def final_answer(response: str) -> float | None:
    """The rightmost ``\\boxed{`` whose text up to the next ``}`` ``float`` accepts; a box that fails
    is cut off and the search goes on to its left."""
    prefix = "\\boxed{"
    while prefix in response:
        start = response.rindex(prefix)
        end = response.find("}", start)
        if end >= 0:
            try:
                return float(response[start + len(prefix) : end])
            except ValueError:
                pass
        response = response[:start]
    return None


@dataclass
class State:
    """What the reference's loop leaves: the history's tokens, each worker's current step, whether
    a finished step held an answer, and which (pass, worker, step) headers carried the nudge."""

    history: list[str] = field(default_factory=list)
    current: list[list[str]] = field(default_factory=list)
    finished: bool = False
    finished_at: int | None = None
    nudged: list[tuple[int, int, int]] = field(default_factory=list)


def generate(
    samples: Sequence[Sequence[str]],
    *,
    first_steps: Sequence[Sequence[str]],
    step_prefix: Callable[[int, int], str],
    nudge: str,
    tokenize: Callable[[str], list[str]],
    every: int,
    max_steps: int,
) -> State:
    """The pass loop: ``samples[w][t]`` is worker w's token at pass t (as scripted)."""
    state = State(current=[list(s) for s in first_steps])
    steps, since_nudge = [1] * len(samples), 0
    for t in range(max_steps):
        if state.finished:
            break
        fed = [[s[t]] for s in samples]
        for w, tokens in enumerate(state.current):
            tokens.append(samples[w][t])
            if is_end_of_step(tokens):
                if final_answer("".join(tokens)) is not None and not state.finished:
                    state.finished, state.finished_at = True, t + 1
                steps[w] += 1
                state.history += tokens
                tokens.clear()
                opening = step_prefix(w, steps[w])
                if since_nudge > every:
                    opening += nudge
                    since_nudge = 0
                    state.nudged.append((t, w, steps[w]))
                tokens += tokenize(opening)
                fed[w] = [samples[w][t], *tokens]
            since_nudge += len(fed[w])
    return state


def finisher_text(state: State, current_step_header: str, pivot: str) -> str:
    """The response the finisher continues, after the prompt: the history, the header, then every
    worker's current step followed by the pivot marker and a blank line."""
    parts = ["".join(state.history), current_step_header]
    parts += ["".join(tokens) + pivot + SEP for tokens in state.current]
    return "".join(parts)


__all__ = ["END_OF_STEP_CHARS", "State", "final_answer", "finisher_text", "generate", "is_end_of_step"]
