"""Resumption: a stream cut off mid-way goes on from what the caller has seen of it.

Before the first delta a failed attempt is simply retried (on another replica where the pool has
one). After it, a retry would duplicate text the caller has seen, so a single-choice request whose
replica died mid-stream is *resumed* instead: the text so far goes back as the prompt
(completions) or as a prefilled assistant message (chat, on servers that continue one), with
``max_tokens`` cut by the tokens already produced. The sample goes on where it stopped and every
token is counted once.

The text so far is the raw one, thinking included: thinking the server sent apart is written
back inside the family's delimiters (``paragen.reasoning.join_thinking``), open where the cut
came mid-thought, so the sample goes on thinking, and a sample cut mid-answer keeps its
thought. On vLLM such a continuation is a raw completion of the server-rendered prompt
(:mod:`paragen.backends.openai_render`), whose output comes back as text: the rest of a thought
is split from it again (``ThoughtSplitter``), as the server's parser would have sent it. The
thinking tokens streamed before the cut are added to what the continuation reports or splits.
"""

from __future__ import annotations

from paragen.backends.openai_render import ThoughtSplitter
from paragen.backends.pool import Replica
from paragen.reasoning import DELIMITERS, ThinkFormat, after_prefill, join_thinking, prefill_of
from paragen.types import ChatMessage, Delta, GenerateRequest, Usage


class Transcript:
    """What the caller has seen of one request's stream: what a resumed attempt goes on from."""

    __slots__ = ("_fmt", "_request", "num_seen", "num_thought_tokens", "texts", "thoughts")

    def __init__(self, request: GenerateRequest, fmt: ThinkFormat) -> None:
        self._request = request
        self._fmt = fmt  # how the model marks its thinking (the backend's thinking format)
        self.texts: list[str] = []  # what the caller has seen (single-choice requests)
        self.thoughts: list[str] = []  # the thinking of it that the server sent apart
        self.num_thought_tokens = 0  # the tokens of the pieces that carried thinking
        self.num_seen = 0  # deltas handed out

    def record(self, delta: Delta) -> None:
        """Note a delta handed to the caller (once per delta: kept to a few appends)."""
        self.num_seen += 1
        self.texts.append(delta.text)
        if delta.reasoning:  # a piece's tokens are the thinking's when it carries some
            self.thoughts.append(delta.reasoning)
            self.num_thought_tokens += delta.num_tokens

    def can_resume(self, usage: Usage, others: list[Replica]) -> bool:
        """Whether another attempt, on one of ``others``, can go on without repeating what the caller
        has seen (``usage``: the stream's counts so far)."""
        if not self.num_seen:
            return True
        if self._request.n != 1 or usage.completion_tokens >= self._request.params.max_tokens:
            return False
        if self._request.messages is None:
            return True
        # A chat reply goes on as a prefilled assistant message: only where a server continues one.
        return any(r.info is not None and r.info.continues_replies for r in others)

    def request(self, usage: Usage) -> GenerateRequest:
        """The request itself, or after a cut-off its continuation from the text seen so far."""
        request = self._request
        if not self.num_seen:
            return request
        text = self._written()
        left = request.params.max_tokens - usage.completion_tokens
        params = request.params.model_copy(update={"max_tokens": left})
        if request.messages is None:
            return request.model_copy(update={"prompt": (request.prompt or "") + text, "params": params})
        messages = list(request.messages)
        if request.continue_final:
            last = messages.pop()
            text = last.content + text
        messages.append(ChatMessage(role="assistant", content=text))
        update = {"messages": tuple(messages), "continue_final": True, "params": params}
        return request.model_copy(update=update)

    def base(self, usage: Usage) -> Usage | None:
        """A resumed attempt's counts before it: the server's reasoning_tokens then add to the
        thinking tokens already streamed (none before a first delta: the attempt starts over)."""
        if not self.num_seen:
            return None
        base = usage.model_copy()
        if base.reasoning_tokens is None and self.thoughts:
            base.reasoning_tokens = self.num_thought_tokens
        return base

    def resplitter(self) -> ThoughtSplitter | None:
        """A splitter for a continuation of a thought the server had been sending apart, still open."""
        if not self.thoughts or any(self.texts):
            return None
        return ThoughtSplitter(self._fmt)

    def _written(self) -> str:
        """The raw text the model has written so far, its thinking in the family's delimiters."""
        request, answer, fmt = self._request, "".join(self.texts), self._fmt
        family = fmt if fmt in DELIMITERS else "think"  # a server's split is written back as <think>
        prefill = prefill_of(request)
        if not self.thoughts:
            # A chat turn of a family whose template opens the thought: the reply prefilled for the
            # continuation is rendered without that generation prompt, so it opens the thought itself.
            return DELIMITERS[family].open + answer if fmt == "think_open" and prefill is None else answer
        text = join_thinking("".join(self.thoughts), answer, "closed" if answer else "open", family)
        return after_prefill(text, prefill, family)
