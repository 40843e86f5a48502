"""How a stream is written: waiting frames go out in one write, each still its own SSE event, and a
long pass-through streams every token once (only the new text is read after each delta)."""

from __future__ import annotations

import anyio
import httpx
import openai
import pytest
from conftest import Serve
from openai.types.chat import ChatCompletionMessageParam

from paragen._live import LiveSample
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.serve.responses import _joined
from paragen.types import Delta, Trace


@pytest.mark.anyio
async def test_waiting_frames_are_joined_into_one_write() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](10)
    frames = [b": paragen {}\r\n\r\n", b'data: {"a":1}\r\n\r\n', b"data: [DONE]\r\n\r\n"]
    for frame in frames:
        send.send_nowait(frame)
    writes = _joined(receive)
    assert await writes.__anext__() == b"".join(frames)
    send.send_nowait(b"data: late\r\n\r\n")
    assert await writes.__anext__() == b"data: late\r\n\r\n"
    send.close()
    with pytest.raises(StopAsyncIteration):
        await writes.__anext__()
    receive.close()


def test_text_since_reads_only_the_new_deltas() -> None:
    live = LiveSample(Trace(id=0))
    for i, piece in enumerate(["a", " b", " c"]):
        live.add(Delta(index=0, text=piece, num_tokens=1), float(i))
    assert live.text_since(0) == ("a b c", 3)
    assert live.text_since(1) == (" b c", 3)
    assert live.text_since(3) == ("", 3)


def test_long_pass_through_streams_every_token_once(serve: Serve) -> None:
    words = [f" w{i}" for i in range(3000)]
    backend = ScriptedBackend([Script(text="".join(words))])
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "go"}]
    with serve(backend) as url, openai.OpenAI(base_url=url, api_key="-", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="scripted",
            messages=messages,
            max_tokens=4000,
            stream=True,
        )
        pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
        body = {"model": "scripted", "messages": messages, "max_tokens": 4000, "stream": True}
        raw = httpx.post(f"{url}/chat/completions", json=body, timeout=60).text
    assert "".join(pieces) == "".join(words)
    assert raw.count("\r\n\r\n") == raw.count("data: ") + raw.count(": paragen ")  # one event per frame
