"""Final-answer extraction, equivalence and voting: pure functions, no event loop needed.

``extract_answer`` returns ``None`` for NO_ANSWER (nothing usable found); voting
ignores those. ``answer_key`` is a cheap canonical form used to group answers for
voting; ``equivalent`` asks math-verify (with its signal-based timeouts switched
off, so it is safe off the main thread; the eval grader adds its own timeouts by
running it in a process pool).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

NO_ANSWER = None
"""What extraction returns when a text holds no usable final answer."""

ExtractMode = Literal["auto", "boxed", "answer_is", "last_number"]

_BOX_OPENERS = ("\\boxed{", "\\fbox{")
_ANSWER_IS = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*[:\s]*\$?\s*(?P<ans>[^\n$]+?)\s*\$?\s*(?:\.|\n|$)",
    re.IGNORECASE,
)
_GSM_MARK = re.compile(r"####\s*(?P<ans>[^\n]+)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_answer(text: str, mode: ExtractMode = "auto") -> str | None:
    """The final answer in ``text``: the last \\boxed{...}, an "answer is ...", or the last number."""
    if mode in ("auto", "boxed"):
        boxed = last_boxed(text)
        if boxed is not None or mode == "boxed":
            return boxed
    if mode in ("auto", "answer_is"):
        found = _answer_is(text)
        if found is not None or mode == "answer_is":
            return found
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else NO_ANSWER


def last_boxed(text: str) -> str | None:
    """Content of the right-most \\boxed{...} (or \\fbox{...}) whose braces balance."""
    best: tuple[int, str] | None = None
    for opener in _BOX_OPENERS:
        start = text.rfind(opener)
        while start != -1:
            content = _balanced(text, start + len(opener))
            if content is not None and content.strip():
                if best is None or start > best[0]:
                    best = (start, content.strip())
                break
            start = text.rfind(opener, 0, start)
    return None if best is None else best[1]


def _balanced(text: str, pos: int) -> str | None:
    depth = 1
    for i in range(pos, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[pos:i]
    return None


def _answer_is(text: str) -> str | None:
    marks = _GSM_MARK.findall(text)
    if marks:
        return str(marks[-1]).strip()
    found = _ANSWER_IS.findall(text)
    return str(found[-1]).strip() if found else None


_TEXT_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
_SPACES = re.compile(r"\\[,;:! ]|\s+")


def answer_key(answer: str) -> str:
    """A canonical form for grouping equal answers when voting ("1,000" and "1000.0" agree)."""
    key = answer.strip().strip("$").strip()
    key = _TEXT_WRAP.sub(r"\1", key)
    key = (
        key.replace("\\left", "")
        .replace("\\right", "")
        .replace("\\dfrac", "\\frac")
        .replace("\\tfrac", "\\frac")
    )
    key = _SPACES.sub("", key).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", key):
        key = key.replace(",", "")
    return _canonical_number(key)


def _canonical_number(key: str) -> str:
    try:
        value = float(key)
    except ValueError:
        return key
    if value != value or value in (float("inf"), float("-inf")):
        return key
    return str(int(value)) if value.is_integer() else repr(value)


def majority_vote(answers: Sequence[str | None], weights: Sequence[float] | None = None) -> str | None:
    """The most common answer (NO_ANSWER ignored); ties go to the answer seen first.

    Answers are grouped by :func:`answer_key`; the winner is returned as first written.
    With ``weights``, votes are weighted (e.g. DeepConf's confidence weighting).
    """
    scores: dict[str, float] = {}
    first: dict[str, str] = {}
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        key = answer_key(answer)
        first.setdefault(key, answer)
        scores[key] = scores.get(key, 0.0) + (1.0 if weights is None else weights[i])
    if not scores:
        return NO_ANSWER
    order = list(first)
    winner = max(order, key=lambda k: (scores[k], -order.index(k)))
    return first[winner]


def vote_counts(answers: Sequence[str | None]) -> dict[str, int]:
    """How many votes each answer key got (NO_ANSWER ignored), most votes first."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            key = answer_key(answer)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def equivalent(prediction: str | None, gold: str) -> bool:
    """Whether ``prediction`` equals ``gold`` mathematically, by math-verify.

    Timeouts are off here (math-verify's use signal.alarm, which breaks off the main
    thread); callers that need a time limit run this in a worker process.
    """
    if prediction is None:
        return False
    from math_verify import parse, verify

    gold_parsed = parse(_as_math(gold), parsing_timeout=None)
    pred_parsed = parse(_as_math(prediction), parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return answer_key(prediction) == answer_key(gold)
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _as_math(answer: str) -> str:
    text = answer.strip()
    return text if text.startswith("$") or "\\boxed" in text else f"${text}$"
