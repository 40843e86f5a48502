"""What ``paragen serve`` costs: 64 concurrent single-sample requests through the server against
the same 64 requests sent straight to its backend, side by side in one process.

The backend is the scripted one (no model): every request is 64 tokens, 10 ms apart, the pace
of a real server decoding one stream (about 100 tokens/s). Through the server each request is
an HTTP call from the official openai async client to ``paragen serve`` on loopback (uvicorn in
a thread of this process, so client and server share one interpreter), one Orchestrator run
of the pass-through strategy, and the answer sent back. Directly it is ``generate(backend,
request)``. Rounds alternate between the two and the medians are compared.

    python benchmarks/serve.py          # last line: {"serve_over_direct_64": ...}   goal <= 1.10
"""

from __future__ import annotations

import json
import statistics
import time

import anyio
import httpx
import openai

from paragen.backends.base import generate
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.serve import ServeConfig, create_app, serve_in_thread
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

CONCURRENT = 64
TOKENS = 64
TOKEN_DELAY_S = 0.010
ROUNDS = 5


def backend() -> ScriptedBackend:
    return ScriptedBackend([Script(text=" ".join(["tok"] * TOKENS), token_delay=TOKEN_DELAY_S)])


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


async def measure(url: str, scripted: ScriptedBackend) -> dict[str, list[float]]:
    limits = httpx.Limits(max_connections=2 * CONCURRENT, max_keepalive_connections=2 * CONCURRENT)
    http = httpx.AsyncClient(limits=limits, timeout=60)
    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, http_client=http)
    times: dict[str, list[float]] = {"direct": [], "serve": [], "serve_stream": []}
    await through_server(client, stream=False)  # warm-up: connections, first-call imports
    await direct(scripted)
    for _ in range(ROUNDS):
        times["direct"].append(await direct(scripted))
        times["serve"].append(await through_server(client, stream=False))
        times["serve_stream"].append(await through_server(client, stream=True))
    await client.close()
    return times


def main() -> None:
    scripted = backend()
    app = create_app(scripted, ServeConfig(model_names=("scripted",)), close_backend=False)
    with serve_in_thread(app) as url:
        times = anyio.run(measure, url, scripted)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ideal = TOKENS * TOKEN_DELAY_S
    print(f"{CONCURRENT} concurrent requests of {TOKENS} tokens at {TOKEN_DELAY_S * 1000:.0f} ms/token")
    print(f"(one request alone: {ideal:.3f} s); median wall time of {ROUNDS} rounds each:")
    for name, value in medians.items():
        spread = ", ".join(f"{v:.3f}" for v in times[name])
        print(f"  {name:13s} {value:.3f} s   ({spread})")
    ratio = medians["serve"] / medians["direct"]
    stream_ratio = medians["serve_stream"] / medians["direct"]
    overhead_ms = (medians["serve"] - medians["direct"]) * 1000
    print(
        f"serve over direct: {ratio:.3f} (+{overhead_ms:.0f} ms for all {CONCURRENT}); "
        f"streamed: {stream_ratio:.3f}"
    )
    print(
        json.dumps(
            {
                "serve_over_direct_64": round(ratio, 3),
                "serve_stream_over_direct_64": round(stream_ratio, 3),
                "direct_s": round(medians["direct"], 3),
                "serve_s": round(medians["serve"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
