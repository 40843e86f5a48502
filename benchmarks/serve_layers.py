"""Where one ``paragen serve`` request's CPU time goes, layer by layer, in this process (no HTTP).

The same chat request is taken through more and more of the server's path, on the scripted
backend with no delay between tokens (so the time is CPU, not sleeping), N requests one after
another, on the event loop ``paragen serve`` uses; the best of REPEATS passes is printed in
microseconds per request, for an answer of 1 token (the fixed cost of a request) and of 64 tokens:

- ``backend``: ``generate(backend, request)``, the backend alone;
- ``parse``: ``json.loads`` of the body and the request model's validation;
- ``parse+plan``: and the Router's plan (strategy, sampling defaults, budget, problem);
- ``run``: one Orchestrator run of the pass-through strategy (backend included);
- ``whole``: parse, plan, run and the rendered answer as JSON text;
- ``streamed``: parse, plan and run with every token rendered as a chunk and every event as a
  comment, as a streamed answer does (the SSE writing itself is not included);
- ``run_traced``: ``run`` with OpenTelemetry tracing on (paragen[otel]): the run's and its
  sample's spans made, batched by the SDK's BatchSpanProcessor and handed to an exporter that
  drops them (the batching thread's CPU is counted; the network to a collector is not). ``run``
  beside it is the same with tracing off.

What the HTTP stack adds (uvicorn, Starlette, the socket) is the ``http_floor`` leg of
benchmarks/serve.py.

    python benchmarks/serve_layers.py     # last line: JSON of the microseconds per request
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from paragen import tracing
from paragen.backends.base import generate
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.serve import replies
from paragen.serve.config import ServeConfig
from paragen.serve.server import event_loop_options
from paragen.serve.service import Service
from paragen.serve.wire import ChatRequest
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

N = 1000
REPEATS = 5


def bodies() -> list[bytes]:
    def one(i: int) -> bytes:
        message = {"role": "user", "content": f"Question {i}: what is {i} + {i}?"}
        return json.dumps({"model": "scripted", "messages": [message], "max_tokens": 128}).encode()

    return [one(i) for i in range(N)]


def layers(service: Service, raw: list[bytes]) -> dict[str, Callable[[], Awaitable[None]]]:
    async def backend() -> None:
        params = SamplingParams(max_tokens=128)
        for i in range(N):
            message = ChatMessage(role="user", content=f"Question {i}: what is {i} + {i}?")
            await generate(service.backend, GenerateRequest(messages=(message,), params=params))

    async def parse() -> None:
        for body in raw:
            ChatRequest.model_validate(json.loads(body))

    async def parse_plan() -> None:
        for body in raw:
            await service.check_prompt(service.router.plan(ChatRequest.model_validate(json.loads(body))))

    plans = [service.router.plan(ChatRequest.model_validate(json.loads(body))) for body in raw]

    async def run() -> None:
        for plan in plans:
            with service.admit(plan):
                await service.run_all(plan)

    async def whole() -> None:
        for body in raw:
            plan = service.router.plan(ChatRequest.model_validate(json.loads(body)))
            await service.check_prompt(plan)
            with service.admit(plan):
                results = await service.run_all(plan)
            json.dumps(replies.completion(plan, results, 0, False))

    async def streamed() -> None:
        frames: list[str | None] = []

        def on_event(index: int, event: object) -> None:
            frames.append(replies.event_comment(index, event))

        for body in raw:
            plan = service.router.plan(ChatRequest.model_validate(json.loads(body)))
            content = replies.ContentChunks(plan, 0, 0)
            with service.admit(plan):
                on_text = functools.partial(_append_chunk, frames, content)
                await service.run_all(plan, on_event=on_event, on_text=on_text)
            frames.clear()

    async def run_traced() -> None:
        tracing.enable(_dropping_provider())
        try:
            await run()
        finally:
            tracing.disable()

    return {
        "backend": backend,
        "parse": parse,
        "parse+plan": parse_plan,
        "run": run,
        "whole": whole,
        "streamed": streamed,
        "run_traced": run_traced,
    }


def _dropping_provider() -> Any:
    """An OpenTelemetry TracerProvider that batches spans as an exporting one does, then drops them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    return provider


def _append_chunk(frames: list[str | None], content: replies.ContentChunks, index: int, text: str) -> None:
    frames.append(content(text))


def cpu_us(job: Callable[[], Awaitable[None]]) -> float:
    start = time.process_time()
    anyio.run(job, backend_options=event_loop_options())
    return (time.process_time() - start) / N * 1e6


def main() -> None:
    raw = bodies()
    table: dict[str, dict[str, int]] = {}
    for tokens in (1, 64):
        backend = ScriptedBackend([Script(text=" ".join(["tok"] * tokens))])
        service = Service(backend, ServeConfig(model_names=("scripted",)))
        jobs = layers(service, raw)
        best = {name: min(cpu_us(job) for _ in range(REPEATS)) for name, job in jobs.items()}
        table[f"{tokens}_token"] = {name: round(us) for name, us in best.items()}
    print(f"CPU microseconds per request, best of {REPEATS} passes of {N} requests:")
    print(f"  {'layer':12s} {'1 token':>8s} {'64 tokens':>10s}")
    for name in table["1_token"]:
        print(f"  {name:12s} {table['1_token'][name]:8d} {table['64_token'][name]:10d}")
    print(json.dumps(table))


if __name__ == "__main__":
    main()
