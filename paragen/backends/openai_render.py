"""A reply that holds thinking, continued as a raw completion of the templated prompt.

Chat templates rewrite a prefilled assistant message that carries thinking, so vLLM's
``continue_final_message`` does not continue it: DeepSeek-R1's template keeps only what follows
``</think>`` (a forced answer loses the thought it answers), and Qwen3's writes an empty, closed
thinking block before a reply with no ``</think>`` (a thought stopped mid-way no longer is one).
So on vLLM a continued reply with thinking in it is sent as the reasoning papers' code sends it:
the conversation before the reply rendered by the server's own chat template (``POST /tokenize``
with the messages, then ``POST /detokenize``), plus the reply so far, as one raw prompt to
``/v1/completions``. The output then comes back as text (vLLM parses reasoning on chat requests
only) and paragen splits it by the model family's delimiters, inside the thinking exactly when
the reply left it open.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import httpx

from paragen.backends.openai_config import OpenAIConfig, ServerInfo
from paragen.backends.openai_http import map_http_errors, raise_for_status
from paragen.backends.pool import Replica
from paragen.errors import BackendProtocolError
from paragen.reasoning import DELIMITERS, StreamSplit, ThinkFormat
from paragen.types import Delta, GenerateRequest, Usage

# Template options a request's extra body may carry, which the rendering must use too.
_TEMPLATE_FIELDS = ("chat_template", "chat_template_kwargs")


def renders_raw(request: GenerateRequest, info: ServerInfo, config: OpenAIConfig) -> bool:
    """Whether ``request`` continues a reply with thinking in it on a server that renders templates."""
    messages, fmt = request.messages, config.thinking.format
    if fmt not in ("think", "think_open") or messages is None or not request.continue_final:
        return False
    if request.tools is not None:
        return False
    if info.kind != "vllm" or config.endpoint == "chat" or not config.thinking.raw_continuation:
        return False
    marks, reply = DELIMITERS[fmt], messages[-1].content
    return marks.open in reply or marks.close in reply


async def raw_continuation(
    client: httpx.AsyncClient,
    replica: Replica,
    info: ServerInfo,
    request: GenerateRequest,
    config: OpenAIConfig,
) -> GenerateRequest:
    """``request`` (a continued reply) as a raw prompt: the server-rendered conversation before the
    reply, then the reply; its opening delimiter written once where the template opens the thinking."""
    *head, reply = request.messages or ()
    template = {k: config.extra_body[k] for k in _TEMPLATE_FIELDS if k in config.extra_body}
    messages = [{"role": m.role, "content": m.content} for m in head]
    body = {"model": info.model, "messages": messages, "add_generation_prompt": True, **template}
    tokens = (await _post(client, f"{replica.root}/tokenize", body)).get("tokens")
    rendered = await _post(client, f"{replica.root}/detokenize", {"model": info.model, "tokens": tokens})
    prompt = rendered.get("prompt")
    if not isinstance(prompt, str) or not isinstance(tokens, list):
        raise BackendProtocolError(f"{replica.root}: /tokenize or /detokenize answered without the prompt")
    text = _after_opener(prompt, reply.content, DELIMITERS[config.thinking.format].open)
    return request.model_copy(update={"prompt": prompt + text, "messages": None, "continue_final": False})


def _after_opener(prompt: str, reply: str, opener: str) -> str:
    """The reply as it follows ``prompt``: without its opening delimiter where the template has
    already opened the thinking (DeepSeek-R1's ``<think>\\n``)."""
    stripped = reply.lstrip()
    if not (prompt.rstrip().endswith(opener) and stripped.startswith(opener)):
        return reply
    rest = stripped[len(opener) :]
    return rest[1:] if prompt.endswith("\n") and rest.startswith("\n") else rest


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    with map_http_errors(url):
        response = await client.post(url, json=body)
    await raise_for_status(response)
    try:
        data = response.json()
    except ValueError as exc:
        raise BackendProtocolError(f"{url}: answer is not JSON") from exc
    if not isinstance(data, dict):
        raise BackendProtocolError(f"{url}: answer is not a JSON object")
    return data


class ThoughtSplitter:
    """The text deltas of a raw continuation of a thought the server had been sending apart, sent
    apart again (:class:`paragen.reasoning.StreamSplit`): text up to the family's closing delimiter
    as thinking (the delimiter dropped, as a reasoning parser drops it), the rest as answer. A
    delta's tokens stay with it, so the one that ends the thought counts to the thinking.
    ``thought_tokens`` are the continuation's thinking tokens, which the completions endpoint does
    not report."""

    def __init__(self, fmt: ThinkFormat) -> None:
        self._split = StreamSplit(fmt, thinking=True)
        self.thought_tokens = 0

    @property
    def done(self) -> bool:
        """The thought has ended: what follows is answer."""
        return self._split.phase == "answer"

    def split(self, delta: Delta) -> Delta:
        if self.done:
            return delta
        thought, answer = self._split.feed(delta.text, last=delta.finish_reason is not None)
        self.thought_tokens += delta.num_tokens
        return dataclasses.replace(delta, text=answer, reasoning=delta.reasoning + thought)


class Resplit:
    """A raw continuation's chunk parser with its thought sent apart again: each chunk's deltas go
    through the splitter until the thought ends (after that, one check per chunk), and the stream's
    ``usage.reasoning_tokens`` are those before the cut plus the continuation's thinking tokens."""

    __slots__ = ("_before", "_parse", "_splitter", "_usage")

    def __init__(
        self, parse: Callable[[str], list[Delta]], splitter: ThoughtSplitter, usage: Usage, before: int
    ) -> None:
        self._parse = parse
        self._splitter = splitter
        self._usage = usage
        self._before = before  # the thinking tokens streamed before the cut

    def parse(self, data: str) -> list[Delta]:
        deltas = self._parse(data)
        splitter = self._splitter
        if splitter.done:
            return deltas
        split = []
        for delta in deltas:
            if not splitter.done:  # the rest is answer, passed on as it comes
                delta = splitter.split(delta)
                self._usage.reasoning_tokens = self._before + splitter.thought_tokens
            split.append(delta)
        return split
