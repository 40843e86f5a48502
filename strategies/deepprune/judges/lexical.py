"""Lexical judge: Jaccard overlap of word n-grams (no model; a floor for the others)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from paragen import RunContext

_WORD = re.compile(r"\w+")


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < n:
        return {tuple(words)} if words else set()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def jaccard(a: str, b: str, n: int = 2) -> float:
    """|A & B| / |A | B| over word n-grams; two empty texts count as identical."""
    left, right = ngrams(a, n), ngrams(b, n)
    union = left | right
    return 1.0 if not union else len(left & right) / len(union)


class LexicalJudge:
    """Word n-gram Jaccard similarity as the same-answer score."""

    name = "lexical"

    def __init__(self, n: int = 2) -> None:
        self.n = n

    async def same_answer(
        self, pairs: Sequence[tuple[str, str]], ctx: RunContext | None = None
    ) -> list[float]:
        return [jaccard(a, b, self.n) for a, b in pairs]
