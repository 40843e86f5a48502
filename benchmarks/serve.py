"""What ``paragen serve`` costs: 64 concurrent single-sample requests through the server against
the same 64 requests sent straight to its backend, side by side in one process.

The backend is the scripted one (no model): every request is 64 tokens, 10 ms apart, the pace
of a real server decoding one stream (about 100 tokens/s). Through the server each request is
an HTTP call from the official openai async client to ``paragen serve`` on loopback (the real
command, ``paragen serve -b scripted:FILE``, in its own process as deployed), one Orchestrator
run of the pass-through strategy, and the answer sent back. Directly it is ``generate(backend,
request)`` in this process on a scripted backend built from the same script file. Rounds
alternate between the two and the medians are compared.

    python benchmarks/serve.py          # last line: {"serve_over_direct_64": ...}   goal <= 1.10
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import openai

from paragen.backends.base import generate
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

CONCURRENT = 64
TOKENS = 64
TOKEN_DELAY_S = 0.010
ROUNDS = 5


SCRIPT = Script(text=" ".join(["tok"] * TOKENS), token_delay=TOKEN_DELAY_S)


def question(i: int) -> str:
    return f"Question {i}: what is {i} + {i}?"


async def direct(scripted: ScriptedBackend) -> float:
    params = SamplingParams(max_tokens=2 * TOKENS)
    requests = [
        GenerateRequest(messages=(ChatMessage(role="user", content=question(i)),), params=params)
        for i in range(CONCURRENT)
    ]
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for request in requests:
            tg.start_soon(generate, scripted, request)
    return time.perf_counter() - start


async def through_server(client: openai.AsyncOpenAI, *, stream: bool) -> float:
    async def one(i: int) -> None:
        messages = [{"role": "user", "content": question(i)}]
        if not stream:
            reply = await client.chat.completions.create(
                model="scripted",
                messages=messages,  # type: ignore[arg-type]
                max_tokens=2 * TOKENS,
            )
            assert reply.usage is not None and reply.usage.completion_tokens == TOKENS
            return
        chunks = await client.chat.completions.create(
            model="scripted",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=2 * TOKENS,
            stream=True,
        )
        async for _ in chunks:
            pass

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(CONCURRENT):
            tg.start_soon(one, i)
    return time.perf_counter() - start


def client_for(url: str) -> openai.AsyncOpenAI:
    limits = httpx.Limits(max_connections=2 * CONCURRENT, max_keepalive_connections=2 * CONCURRENT)
    http = httpx.AsyncClient(limits=limits, timeout=60)
    # Retries only for a kept-alive connection the server closed between rounds (a reconnect).
    return openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=2, http_client=http)


async def measure(url: str, floor_url: str, scripted: ScriptedBackend) -> dict[str, list[float]]:
    client, floor = client_for(url), client_for(floor_url)
    times: dict[str, list[float]] = {"direct": [], "http_floor": [], "serve": [], "serve_stream": []}
    await through_server(client, stream=False)  # warm-up: connections, first-call imports
    await through_server(floor, stream=False)
    await direct(scripted)
    for _ in range(ROUNDS):
        times["direct"].append(await direct(scripted))
        times["http_floor"].append(await through_server(floor, stream=False))
        times["serve"].append(await through_server(client, stream=False))
        times["serve_stream"].append(await through_server(client, stream=True))
    await client.close()
    await floor.close()
    return times


# The floor: a bare Starlette app under uvicorn that sleeps as long as one scripted request takes
# and returns a fixed chat completion. What it adds over direct is the HTTP stack and the client,
# not paragen.
FLOOR_APP = """
import sys, anyio, uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
REPLY = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok"},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 1, "completion_tokens": %d, "total_tokens": %d}}
async def chat(request):
    await request.body()
    await anyio.sleep(%f)
    return JSONResponse(REPLY)
app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=300)
server = uvicorn.Server(config)
import socket
sock = socket.socket(); sock.bind(("127.0.0.1", 0))
print(f"floor on http://127.0.0.1:{sock.getsockname()[1]}/v1", file=sys.stderr, flush=True)
server.run(sockets=[sock])
"""


@contextmanager
def serve_subprocess(script: Path, *, floor: bool = False) -> Iterator[str]:
    command = [sys.executable, "-m", "paragen.cli", "serve", "-b", f"scripted:{script}", "--port", "0"]
    command += ["--log-level", "warning"]
    if floor:
        command = [sys.executable, "-c", FLOOR_APP % (TOKENS, TOKENS + 1, TOKENS * TOKEN_DELAY_S)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.search(r"on (http://\S+/v1)", line)
        if match is None:
            raise RuntimeError(f"paragen serve did not start: {line}{process.stderr.read()}")
        yield match[1]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text(SCRIPT.model_dump_json() + "\n")
        scripted = ScriptedBackend.from_spec(str(script))
        with serve_subprocess(script) as url, serve_subprocess(script, floor=True) as floor_url:
            times = anyio.run(measure, url, floor_url, scripted)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ideal = TOKENS * TOKEN_DELAY_S
    print(f"{CONCURRENT} concurrent requests of {TOKENS} tokens at {TOKEN_DELAY_S * 1000:.0f} ms/token")
    print(f"(one request alone: {ideal:.3f} s); median wall time of {ROUNDS} rounds each:")
    for name, value in medians.items():
        spread = ", ".join(f"{v:.3f}" for v in times[name])
        print(f"  {name:13s} {value:.3f} s   ({spread})")
    ratio = medians["serve"] / medians["direct"]
    stream_ratio = medians["serve_stream"] / medians["direct"]
    floor_ratio = medians["http_floor"] / medians["direct"]
    overhead_ms = (medians["serve"] - medians["direct"]) * 1000
    print(
        f"serve over direct: {ratio:.3f} (+{overhead_ms:.0f} ms for all {CONCURRENT}); "
        f"streamed: {stream_ratio:.3f}; a bare Starlette app sleeping as long: {floor_ratio:.3f}"
    )
    print(
        json.dumps(
            {
                "serve_over_direct_64": round(ratio, 3),
                "serve_stream_over_direct_64": round(stream_ratio, 3),
                "http_floor_over_direct_64": round(floor_ratio, 3),
                "direct_s": round(medians["direct"], 3),
                "serve_s": round(medians["serve"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
