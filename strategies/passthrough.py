"""The strategy behind a plain model name in ``paragen serve``: the request's own messages (or
prompt), sampled once (registered as ``passthrough``; without messages or a prompt, the question
as one user message).

With ``tools`` the request offers them to the backend and the reply may be its tool calls,
passed on unchanged.

It is a strategy like any other (it speaks only to its RunContext), so a pass-through
request is accounted, cancelled and streamed exactly as a strategy's run is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.reasoning import StreamSplit, ThinkFormat
from paragen.types import ChatMessage, GenerateRequest, Problem, StrategyResult, TextSink, ToolOptions, Trace


class _Growing(Protocol):
    """What the fan-out monitor is handed: a running sample whose new text (and thinking) can be read."""

    think_format: ThinkFormat

    def text_since(self, start: int) -> tuple[str, int]: ...

    def reasoning_since(self, start: int) -> tuple[str, int]: ...


class Passthrough(BaseStrategy[StrategyConfig]):
    """Send the client's messages (or raw prompt) to the backend unchanged; answer with the text."""

    name = "passthrough"

    def __init__(
        self,
        config: StrategyConfig | None = None,
        *,
        messages: Sequence[ChatMessage] | None = None,
        prompt: str | None = None,
        on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
        tools: ToolOptions | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, **overrides)
        self.tools = tools
        self.messages = messages
        self.prompt = prompt
        self.on_text = on_text
        self.on_reasoning = on_reasoning  # thinking as it streams (sent apart, or split from the text)
        self._sent = 0  # answer characters forwarded
        self._thought = 0  # thinking characters split from the text and forwarded
        self._deltas_sent = 0  # deltas forwarded (the monitor reads only the new ones)
        self._thoughts_sent = 0  # pieces of thinking the server sent apart, forwarded
        self._split: StreamSplit | None = None  # the text's own thinking, split as it streams

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        messages = self.messages
        if messages is None and self.prompt is None:
            messages = [ChatMessage(role="user", content=problem.question)]
        request = ctx.request(messages=messages, prompt=self.prompt)
        if self.tools is not None:
            request = request.model_copy(update={"tools": self.tools})
        if self.on_text is None:
            trace = await ctx.sample(request)
        else:
            trace = await self._streamed(request, ctx)
        result = ctx.finish(None, text=trace.text, reasoning=trace.reasoning)
        result.tool_calls = trace.tool_calls  # the backend's, unchanged
        return result

    async def _streamed(self, request: GenerateRequest, ctx: RunContext) -> Trace:
        async with ctx.fanout(request, n=1, monitor=self._forward) as fan:
            async for trace in fan:
                self._send_rest(trace)  # what the last delta brought, if the monitor missed it
                return trace
        raise AssertionError("a fan-out of one ended without its trace")

    def _forward(self, live: _Growing) -> None:
        if self.on_reasoning is not None:
            thought, self._thoughts_sent = live.reasoning_since(self._thoughts_sent)
            if thought:
                self.on_reasoning(thought)
            elif self._split is None and live.think_format in ("think", "think_open"):
                self._split = StreamSplit(live.think_format)
        text, self._deltas_sent = live.text_since(self._deltas_sent)
        if text:
            self._send(text)

    @property
    def _splitting(self) -> bool:
        """Split the text itself: it may hold thinking, and the server has sent none apart."""
        return self._split is not None and not self._thoughts_sent

    def _send(self, text: str) -> None:
        """Forward raw text: its thinking apart where the model thinks in its text (no server parser)."""
        on_reasoning = self.on_reasoning if self._splitting else None
        if on_reasoning is not None and self._split is not None:  # (narrowed for the type checker)
            thought, text = self._split.feed(text)
            if thought:
                on_reasoning(thought)
                self._thought += len(thought)
        if text and self.on_text is not None:
            self.on_text(text)
            self._sent += len(text)

    def _send_rest(self, trace: Trace) -> None:
        """The end of the trace's parts not forwarded yet (a last delta the monitor missed, a piece
        of a delimiter held back): the streamed parts are the beginnings of the trace's."""
        on_reasoning = self.on_reasoning if self._splitting else None
        if on_reasoning is not None and len(trace.reasoning) > self._thought:
            on_reasoning(trace.reasoning[self._thought :])
            self._thought = len(trace.reasoning)
        if self.on_text is not None and len(trace.text) > self._sent:
            self.on_text(trace.text[self._sent :])
            self._sent = len(trace.text)
