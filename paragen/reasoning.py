"""A reasoning model's output in two parts: its thinking, then its answer.

Servers started with a reasoning parser send the thinking in a field of its own (vLLM's
``reasoning``, ``reasoning_content`` elsewhere); paragen keeps it in :attr:`Delta.reasoning`.
Without a parser the thinking stays in the text, marked by the model family's delimiters,
and :func:`split_thinking` separates it by the family's :data:`ThinkFormat`:

- ``"think"``: ``<think>`` ... ``</think>`` (Qwen3, QwQ, SmolLM3). Output before ``</think>``
  is thinking (a leading ``<think>`` dropped); output that opens ``<think>`` and never closes
  it was cut off while thinking. Output with neither tag has no thinking section.
- ``"think_open"``: the chat template opens ``<think>`` in the prompt (DeepSeek-R1 and its
  distills), so output without ``</think>`` is all thinking, still open.
- ``"gpt_oss"``: gpt-oss's harmony channels: the ``analysis`` channel is thinking, the
  ``final`` channel the answer.
- ``"none"``: no split; the whole text is the answer, as if the model did not think.

The one rule for a sample cut off before its thinking ended: its answer part is empty, so
no answer is extracted from it (a ``\\boxed{}`` written while thinking does not count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from paragen.errors import ConfigError
from paragen.types import GenerateRequest, ThinkingState, Trace

ThinkFormat = Literal["think", "think_open", "gpt_oss", "none"]


@dataclass(frozen=True, slots=True)
class Delimiters:
    """How a family's thinking opens and closes in its raw text."""

    open: str
    close: str
    end: str = ""  # what ends the answer (dropped from it), gpt-oss's "<|return|>"


DELIMITERS: dict[ThinkFormat, Delimiters] = {
    "think": Delimiters("<think>", "</think>"),
    "think_open": Delimiters("<think>", "</think>"),
    "gpt_oss": Delimiters(
        "<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant<|channel|>final<|message|>",
        "<|return|>",
    ),
}


@dataclass(frozen=True, slots=True)
class Split:
    """A text's thinking and answer parts; ``answer_start`` is where the answer begins in the text."""

    reasoning: str
    answer: str
    state: ThinkingState
    answer_start: int


FORMATS: tuple[ThinkFormat, ...] = get_args(ThinkFormat)


def delimiters(fmt: ThinkFormat) -> Delimiters | None:
    """The family's delimiters (None for ``"none"``); a ConfigError naming the formats for any other
    name (a misspelt format would otherwise read every output as "no thinking")."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown thinking format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    return DELIMITERS.get(fmt)


def split_thinking(text: str, fmt: ThinkFormat) -> Split:
    """``text`` (a model's raw output) as thinking and answer, by the family's delimiters."""
    marks = delimiters(fmt)
    if marks is None:
        return Split("", text, "none", 0)
    close, length = _find_close(text, marks, fmt)
    if close >= 0:
        start = _opening_end(text, marks)
        answer_start = close + length
        answer = _strip_end(text[answer_start:], marks.end)
        return Split(text[start:close], answer, "closed", answer_start)
    if fmt == "think_open" or text.lstrip().startswith(marks.open):
        return Split(text[_opening_end(text, marks) :], "", "open", len(text))
    return Split("", _strip_end(text, marks.end), "none", 0)


_GPT_OSS_FINAL = "<|channel|>final<|message|>"


def _find_close(text: str, marks: Delimiters, fmt: ThinkFormat) -> tuple[int, int]:
    """Where the thinking's closing delimiter starts (-1: nowhere) and its length."""
    found = text.find(marks.close)
    if found >= 0 or fmt != "gpt_oss":
        return found, len(marks.close)
    # gpt-oss's final channel may also come straight after the analysis message, without "<|end|>".
    return text.find(_GPT_OSS_FINAL), len(_GPT_OSS_FINAL)


def _opening_end(text: str, marks: Delimiters) -> int:
    stripped = text.lstrip()
    return len(text) - len(stripped) + len(marks.open) if stripped.startswith(marks.open) else 0


def _strip_end(answer: str, end: str) -> str:
    return answer[: -len(end)] if end and answer.endswith(end) else answer


def join_thinking(reasoning: str, answer: str, state: ThinkingState, fmt: ThinkFormat) -> str:
    """The raw text a model of family ``fmt`` wrote for these parts (what a continuation prefills)."""
    marks = delimiters(fmt)
    if marks is None or state == "none":
        return reasoning + answer
    # The opener is written even where the family's template opens the thinking (think_open): a
    # prefilled reply is rendered without the generation prompt that would have opened it.
    if state == "open":
        return marks.open + reasoning
    return marks.open + reasoning + marks.close + answer


def leaves_open(text: str, fmt: ThinkFormat = "think") -> bool:
    """Whether ``text`` (a prompt, a prefilled reply) leaves the thinking open: its last opening
    delimiter after its last closing one (``<think>`` ones where the family has none)."""
    marks = DELIMITERS.get(fmt, DELIMITERS["think"])
    return text.rfind(marks.open) > text.rfind(marks.close)


def prefill_of(request: GenerateRequest) -> str | None:
    """What a request's output directly follows: its raw prompt, or the reply it continues (None: a
    fresh chat turn, whose template decides)."""
    messages = request.messages
    if messages is None:
        return request.prompt
    return messages[-1].content if request.continue_final else None


def after_prefill(raw: str, prefill: str | None, fmt: ThinkFormat) -> str:
    """``raw`` (an output written back with its delimiters by :func:`join_thinking`) as it follows
    ``prefill``: its opener is dropped where the prefill has opened the thought already."""
    marks = DELIMITERS.get(fmt, DELIMITERS["think"])
    return raw.removeprefix(marks.open) if prefill is not None and leaves_open(prefill, fmt) else raw


def whole_text(trace: Trace, fmt: ThinkFormat, *, close: bool = False) -> str:
    """A trace's output as one text, its thinking in the family's delimiters (``"<think>"`` ones where
    the family has none but a server sent the thinking apart): what a reader of whole traces reads.
    With ``close``, thinking still open at the end is closed (what a forced answer continues)."""
    fmt = fmt if fmt in DELIMITERS else "think"
    text = join_thinking(trace.reasoning, trace.text, trace.thinking, fmt)
    return text + DELIMITERS[fmt].close if close and trace.thinking == "open" else text


class StreamSplit:
    """A raw output split into thinking and answer as it streams, by the family's ``<think>``
    delimiters (``think`` and ``think_open``), as :func:`split_thinking` splits the whole text: a
    leading opener starts the thinking (``think_open``: the output starts in it; ``thinking``: it is
    already in it), the closer ends it, and both are dropped. Text that may be the start of a
    delimiter (SmolLM2 writes ``</think>`` in three tokens) waits for the next piece. One case
    streams otherwise than the whole text splits: a ``think`` output that writes ``</think>`` without
    having opened the thought is streamed as answer (the family opens its thoughts)."""

    def __init__(self, fmt: ThinkFormat, *, thinking: bool = False) -> None:
        marks = DELIMITERS["think_open" if fmt == "think_open" else "think"]
        self.open, self.close = marks.open, marks.close
        self.phase: Literal["start", "thinking", "answer"] = "thinking" if thinking else "start"
        self._unopened: Literal["thinking", "answer"] = "thinking" if fmt == "think_open" else "answer"
        self._held = ""

    def feed(self, text: str, *, last: bool = False) -> tuple[str, str]:
        """The (thinking, answer) of the next piece; ``last`` gives back what was held."""
        text, self._held = self._held + text, ""
        if self.phase == "start":
            written = text.lstrip()
            if written.startswith(self.open):
                self.phase, text = "thinking", written[len(self.open) :]
            elif not last and self.open.startswith(written):  # still undecided (blank, or "<thi")
                self._held = text
                return "", ""
            else:
                self.phase = self._unopened
        if self.phase == "answer":
            return "", text
        at = text.find(self.close)
        if at >= 0:
            self.phase = "answer"
            return text[:at], text[at + len(self.close) :]
        keep = 0 if last else _delimiter_start(text, self.close)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep], ""


def _delimiter_start(text: str, delimiter: str) -> int:
    """The length of the longest end of ``text`` that begins ``delimiter``."""
    for size in range(min(len(delimiter) - 1, len(text)), 0, -1):
        if delimiter.startswith(text[-size:]):
            return size
    return 0


def tokens_before(offset: int, chunks: list[str], uneven: dict[int, int]) -> int:
    """Tokens of the chunks that start before character ``offset`` of their joined text (the chunk
    that holds the end of thinking counts to the thinking); a chunk is one token unless ``uneven``
    (chunk index -> tokens) says otherwise."""
    position = index = 0
    while index < len(chunks) and position < offset:
        position += len(chunks[index])
        index += 1
    return index + sum(count - 1 for at, count in uneven.items() if at < index)
