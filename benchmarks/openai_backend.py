"""paragen's OpenAI backend against the official `openai` client, on the same local server.

A small streaming server written here (raw HTTP/1.1 over anyio, in its own process) answers
/v1/completions with server-sent events as fast as it can: each stream carries TOKENS tokens
in chunks shaped like vLLM's (continuous usage), one token per chunk, or K with
``--tokens-per-chunk K`` (as a server told to send several tokens at a time does, e.g. vLLM's
``--stream-interval``). With the server adding almost nothing, the wall time of STREAMS
concurrent streams is the client's own cost. Both clients run the same workload, alternating,
REPEATS times; the ratio of their median wall times is printed, with each client's chunks per
second (one process) and its CPU time per chunk (this process's CPU time over the run; the
server's is not in it).

    python benchmarks/openai_backend.py [--tokens-per-chunk K]

The last line printed is JSON: {"paragen_over_openai_sdk_64": ..., "paragen_chunks_per_s": ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import anyio
import httpx
from anyio.abc import SocketStream

STREAMS = 64
TOKENS = 256
REPEATS = 5
MODEL = "bench"


# --- the server -----------------------------------------------------------------------------------


def _event(first: int, per_chunk: int, last: bool) -> bytes:
    done = min(first + per_chunk, TOKENS)
    text = "".join(f" t{i}" for i in range(first, done))
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if last else None}
    usage = {"prompt_tokens": 4, "completion_tokens": done, "total_tokens": done + 4}
    chunk = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": MODEL}
    data = json.dumps({**chunk, "choices": [choice], "usage": usage})
    return f"data: {data}\n\n".encode()


def events(per_chunk: int) -> list[bytes]:
    """One stream's SSE events: TOKENS tokens, ``per_chunk`` to a chunk, then [DONE]."""
    starts = range(0, TOKENS, per_chunk)
    return [_event(i, per_chunk, i + per_chunk >= TOKENS) for i in starts] + [b"data: [DONE]\n\n"]


MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm"}]})


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def _read_request(stream: SocketStream, buffer: bytearray) -> str | None:
    """The request line of the next request on this connection (its body read and dropped)."""
    while b"\r\n\r\n" not in buffer:
        try:
            buffer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        rest += await stream.receive()
    buffer[:] = rest[length:]
    return head.split(b"\r\n", 1)[0].decode()


async def _serve_connection(stream: SocketStream, stream_events: list[bytes]) -> None:
    buffer = bytearray()
    async with stream:
        while (line := await _read_request(stream, buffer)) is not None:
            if " /v1/models" in line:
                body = MODELS.encode()
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                await stream.send(head % len(body) + body)
                continue
            if "/completions" not in line:  # no /tokenize: clients estimate their counts
                await stream.send(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                continue
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            try:
                await stream.send(head)
                for event in stream_events:
                    await stream.send(_chunked(event))
                await stream.send(b"0\r\n\r\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return


async def _serve(port: int, per_chunk: int = 1) -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    stream_events = events(per_chunk)

    async def serve(stream: SocketStream) -> None:
        await _serve_connection(stream, stream_events)

    await listener.serve(serve)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(per_chunk: int = 1) -> tuple[str, subprocess.Popen[bytes]]:
    """The server in its own process, ``per_chunk`` tokens to a chunk; its base URL once it answers."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(per_chunk)])
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            httpx.get(f"{url}/models", timeout=1.0)
            return url, process
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the benchmark server did not start")


# --- the two clients ------------------------------------------------------------------------------


async def run_paragen(url: str) -> tuple[float, int]:
    from paragen.backends.openai import OpenAIBackend
    from paragen.types import GenerateRequest, SamplingParams

    backend = OpenAIBackend.from_spec(url, api_key_env=None, max_retries=0)
    await backend.open()
    counts: list[int] = []

    async def one() -> None:
        request = GenerateRequest(prompt="go", params=SamplingParams(max_tokens=TOKENS))
        async with backend.stream(request) as stream:
            async for _ in stream:
                pass
            counts.append(stream.usage.completion_tokens)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(STREAMS):
            tg.start_soon(one)
    wall = time.perf_counter() - start
    await backend.aclose()
    return wall, sum(counts)


async def run_openai_sdk(url: str) -> tuple[float, int]:
    from openai import AsyncOpenAI

    # The same connection limits and timeouts as paragen's client, so only the client code differs.
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=64)
    http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(600.0, connect=10.0))
    # openai 3.x types this as httpx2's client; it takes httpx's and uses it as given.
    client = AsyncOpenAI(base_url=url, api_key="none", max_retries=0, http_client=http)  # type: ignore[arg-type]
    await client.models.list()
    counts: list[int] = []

    async def one() -> None:
        stream = await client.completions.create(  # type: ignore[call-overload]  # vLLM's extra usage key
            model=MODEL,
            prompt="go",
            max_tokens=TOKENS,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
        tokens = 0
        async with stream:
            async for chunk in stream:
                tokens = chunk.usage.completion_tokens if chunk.usage else tokens
        counts.append(tokens)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(STREAMS):
            tg.start_soon(one)
    wall = time.perf_counter() - start
    await client.close()
    return wall, sum(counts)


async def main(per_chunk: int) -> None:
    url, server = start_server(per_chunk)
    chunks = STREAMS * len(events(per_chunk)[:-1])
    try:
        walls: dict[str, list[float]] = {"paragen": [], "openai_sdk": []}
        cpus: dict[str, list[float]] = {"paragen": [], "openai_sdk": []}
        await run_paragen(url)  # warm-up: imports, connection pool
        await run_openai_sdk(url)
        for _ in range(REPEATS):
            for name, run in (("paragen", run_paragen), ("openai_sdk", run_openai_sdk)):
                cpu = time.process_time()
                wall, tokens = await run(url)
                cpus[name].append(time.process_time() - cpu)
                assert tokens == STREAMS * TOKENS, (name, tokens)
                walls[name].append(wall)
    finally:
        server.terminate()
        server.wait()
    paragen, sdk = statistics.median(walls["paragen"]), statistics.median(walls["openai_sdk"])
    for name, values in walls.items():
        print(
            f"{name:>11}: median {statistics.median(values):.3f}s over {REPEATS} runs "
            f"({STREAMS} streams x {chunks // STREAMS} chunks of {per_chunk} tokens; "
            f"{', '.join(f'{v:.3f}' for v in values)})"
        )
    result = {
        "paragen_over_openai_sdk_64": round(paragen / sdk, 3),
        "paragen_s": round(paragen, 3),
        "openai_sdk_s": round(sdk, 3),
        "paragen_chunks_per_s": round(chunks / paragen),
        "openai_sdk_chunks_per_s": round(chunks / sdk),
        "paragen_cpu_us_per_chunk": round(statistics.median(cpus["paragen"]) / chunks * 1e6, 1),
        "openai_sdk_cpu_us_per_chunk": round(statistics.median(cpus["openai_sdk"]) / chunks * 1e6, 1),
        "streams": STREAMS,
        "tokens_per_stream": TOKENS,
        "tokens_per_chunk": per_chunk,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        anyio.run(_serve, int(sys.argv[2]), int(sys.argv[3]))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
        parser.add_argument(
            "--tokens-per-chunk", type=int, default=1, choices=range(1, TOKENS + 1), metavar="K"
        )
        anyio.run(main, parser.parse_args().tokens_per_chunk)
