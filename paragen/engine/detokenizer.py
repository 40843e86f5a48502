"""Incremental detokenization with stop strings.

Text is released only when it decodes cleanly (a token may end in the middle of a
multi-byte character), and text that could be the start of a stop string is held
back until it is known not to be one, so the returned text ends before the stop
string, as with OpenAI's API.
"""

from __future__ import annotations

from typing import Any

_WINDOW = 6  # tokens of left context so that decoding a suffix spaces words as the full decode does


class Detokenizer:
    __slots__ = ("_ids", "_prefix", "_read", "_text", "emitted", "stop", "tokenizer")

    def __init__(self, tokenizer: Any, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = stop
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens already turned into text
        self._text = ""  # all clean text so far
        self.emitted = 0  # characters of _text already handed out

    @property
    def text(self) -> str:
        """All clean text so far, including what is held back as a possible stop string."""
        return self._text

    def add(self, token_id: int) -> tuple[str, bool]:
        """Feed one token; returns (text to hand out now, whether a stop string was hit)."""
        self._ids.append(token_id)
        window = self._ids[self._prefix :]
        before = self.tokenizer.decode(window[: self._read - self._prefix], skip_special_tokens=True)
        now = self.tokenizer.decode(window, skip_special_tokens=True)
        if now.endswith("\ufffd") or len(now) <= len(before):
            return self._release(hit=False)  # an incomplete character (or nothing visible) yet
        search_from = max(0, len(self._text) - max((len(s) for s in self.stop), default=0))
        self._text += now[len(before) :]
        self._read = len(self._ids)
        self._prefix = max(0, self._read - _WINDOW)
        return self._check_stop(search_from)

    def _check_stop(self, search_from: int) -> tuple[str, bool]:
        hits = [i for s in self.stop if (i := self._text.find(s, search_from)) >= 0]
        if hits:
            self._text = self._text[: min(hits)]
            return self._release(hit=True)
        return self._release(hit=False)

    def _release(self, hit: bool) -> tuple[str, bool]:
        end = len(self._text) if hit else len(self._text) - self._held_back()
        end = max(end, self.emitted)
        out = self._text[self.emitted : end]
        self.emitted = end
        return out, hit

    def _held_back(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of a stop string."""
        best = 0
        for s in self.stop:
            for k in range(min(len(s) - 1, len(self._text)), best, -1):
                if self._text.endswith(s[:k]):
                    best = k
                    break
        return best

    def flush(self) -> str:
        """Everything not yet handed out (at the end of a sequence that did not hit a stop string)."""
        out = self._text[self.emitted :]
        self.emitted = len(self._text)
        return out
