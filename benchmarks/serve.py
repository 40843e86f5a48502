"""What ``paragen serve`` costs: 64 concurrent single-sample requests through the server against
the same 64 requests sent straight to its backend, side by side, rounds alternating.

The backend is the scripted one (no model): every request is 64 tokens, 10 ms apart, the pace
of a real server decoding one stream (about 100 tokens/s), so one request alone takes 0.64 s.
Each leg sends all 64 requests at once and is timed until the last answer is complete:

- ``direct``: ``generate(backend, request)`` for the 64 requests in this process, on a scripted
  backend built from the same script file. No HTTP, no orchestrator: the backend alone.
- ``serve``: the real command, ``paragen serve -b scripted:FILE`` with its default options, in
  its own process; 64 clients, each a keep-alive HTTP/1.1 connection of its own (as 64 users
  are), send ``POST /v1/chat/completions`` from a load-generator process of their own, as
  clients are in real use. Each request is parsed and validated, planned, run as one
  Orchestrator run of the pass-through strategy (one sample through the fan-out, the ledger,
  the accounting) and answered with the whole chat completion (usage, paragen's extensions);
  the client reads it to the end and checks ``completion_tokens == 64`` (after the clock stops).
- ``serve_stream``: the same with ``stream: true``: the role chunk, the run's live events as
  SSE comments, one chunk per token, the finish chunk and ``[DONE]``, each read by the client
  (64 content chunks checked).
- ``http_floor`` and ``http_floor_stream``: a bare Starlette app (no paragen code on the
  request path) served exactly as ``paragen serve`` is (same uvicorn settings, event loop and
  HTTP parser), that reads the body, waits as long as one request takes (64 x 10 ms, on the
  same clock schedule as the scripted backend) and answers a fixed completion, or streams 64
  fixed chunks through sse-starlette. What they add over ``direct`` is the HTTP stack and the
  client, not paragen; ``serve`` minus ``http_floor`` is what paragen itself adds.
- ``serve_openai``: ``serve`` again, but each of the 64 clients is the official ``openai``
  async client (its own instance, as 64 users would have), in the load-generator process.
- ``serve_traced``: ``serve`` with OpenTelemetry tracing on (``--otlp-endpoint``): every request's
  spans (server, run, sample) batched and exported over OTLP/HTTP to a sink in a process of its
  own that reads and drops them, as a Collector would take them. ``serve`` is the same with
  tracing off, so the two side by side are what tracing costs.

Beside the wall times it prints the CPU time per request of the server process (from
/proc, Linux) and of the load generator: on a shared machine they say what each layer costs
even when the wall times are noisy.

    python benchmarks/serve.py          # last line: {"serve_over_direct_64": ...}   goal <= 1.10
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import h11

from paragen.backends.base import generate
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.serve.server import event_loop_options
from paragen.types import ChatMessage, GenerateRequest, SamplingParams

CONCURRENT = 64
TOKENS = 64
TOKEN_DELAY_S = 0.010
ROUNDS = 7
LEGS = ("direct", "http_floor", "serve", "http_floor_stream", "serve_stream", "serve_openai", "serve_traced")

SCRIPT = Script(text=" ".join(["tok"] * TOKENS), token_delay=TOKEN_DELAY_S)


def question(i: int) -> str:
    return f"Question {i}: what is {i} + {i}?"


def body(i: int, *, stream: bool) -> dict[str, Any]:
    messages = [{"role": "user", "content": question(i)}]
    return {"model": "scripted", "messages": messages, "max_tokens": 2 * TOKENS, "stream": stream}


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


# --- the load generator: its own process, one keep-alive connection per client -------------------


class Client:
    """One user: a keep-alive HTTP/1.1 connection (h11) that sends one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.stream: anyio.abc.SocketStream | None = None
        self.http = h11.Connection(h11.CLIENT)
        self.last_used = 0.0

    async def connect(self) -> None:
        """A fresh connection if the last one idled long enough for the server to close it (uvicorn
        closes a keep-alive connection idle for 5 s): connecting is not what a round measures."""
        if self.stream is not None and time.monotonic() - self.last_used < 2:
            return
        if self.stream is not None:
            await self.stream.aclose()
        self.stream = await anyio.connect_tcp(self.host, self.port)
        self.http = h11.Connection(h11.CLIENT)

    async def post(self, path: str, payload: bytes) -> bytes:
        assert self.stream is not None, "connect() first"
        http = self.http
        head = [("Host", self.host), ("Content-Type", "application/json")]
        head.append(("Content-Length", str(len(payload))))
        out = http.send(h11.Request(method="POST", target=path, headers=head))
        out += http.send(h11.Data(data=payload)) + http.send(h11.EndOfMessage())
        await self.stream.send(out)
        parts: list[bytes] = []
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                http.receive_data(await self.stream.receive(65536))
            elif isinstance(event, h11.Response) and event.status_code != 200:
                raise RuntimeError(f"HTTP {event.status_code} from {path}")
            elif isinstance(event, h11.Data):
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                http.start_next_cycle()
                self.last_used = time.monotonic()
                return b"".join(parts)


def check(answer: bytes, *, stream: bool) -> None:
    """The answer is whole: 64 content chunks and [DONE], or usage saying 64 tokens."""
    if stream:
        text = answer.decode()
        chunks = [json.loads(m) for m in re.findall(r"^data: (\{.*)$", text, flags=re.M)]
        content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
        if len(content) != TOKENS or not text.rstrip().endswith("data: [DONE]"):
            raise RuntimeError(f"incomplete stream: {len(content)} content chunks")
    elif json.loads(answer)["usage"]["completion_tokens"] != TOKENS:
        raise RuntimeError(f"wrong answer: {answer[:200]!r}")


async def load_round(base_url: str, clients: list[Client], *, stream: bool) -> tuple[float, float]:
    """All clients ask at once; (wall seconds until the last answer, this process's CPU seconds)."""
    path = base_url.split("://", 1)[1].partition("/")[2]
    payloads = [json.dumps(body(i, stream=stream)).encode() for i in range(CONCURRENT)]
    answers: list[bytes] = [b""] * CONCURRENT
    for client in clients:
        await client.connect()

    async def one(i: int) -> None:
        answers[i] = await clients[i].post(f"/{path}/chat/completions", payloads[i])

    cpu, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(CONCURRENT):
            tg.start_soon(one, i)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    for answer in answers:
        check(answer, stream=stream)
    return wall, cpu


async def openai_round(base_url: str, clients: list[Any]) -> tuple[float, float]:
    async def one(i: int) -> None:
        request = body(i, stream=False)
        reply = await clients[i].chat.completions.create(**request)
        if reply.usage.completion_tokens != TOKENS:
            raise RuntimeError(f"wrong answer: {reply}")

    cpu, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(CONCURRENT):
            tg.start_soon(one, i)
    return time.perf_counter() - start, time.process_time() - cpu


async def load_main() -> None:
    """Reads ``URL MODE`` lines (MODE: plain, stream, openai); answers each with one JSON line."""
    import openai

    pools: dict[tuple[str, str], list[Any]] = {}
    lines = anyio.wrap_file(sys.stdin)
    async for line in lines:
        url, mode = line.split()
        clients = pools.get((url, mode))
        if clients is None:
            if mode == "openai":
                clients = [openai.AsyncOpenAI(base_url=url, api_key="-") for _ in range(CONCURRENT)]
            else:
                host, _, port = url.split("://", 1)[1].partition("/")[0].rpartition(":")
                clients = [Client(host, int(port)) for _ in range(CONCURRENT)]
            pools[(url, mode)] = clients
        if mode == "openai":
            wall, cpu = await openai_round(url, clients)
        else:
            wall, cpu = await load_round(url, clients, stream=mode == "stream")
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


class LoadProcess:
    """The load generator, driven one round at a time over its stdin and stdout."""

    def __init__(self) -> None:
        command = [sys.executable, __file__, "--load"]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def round(self, url: str, mode: str) -> tuple[float, float]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{url} {mode}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the load generator died (see above)")
        answer = json.loads(line)
        return answer["wall"], answer["cpu"]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


# --- the servers ----------------------------------------------------------------------------------


# The floor: no paragen code on the request path, served by paragen.serve.server.run_server as the
# command serves its app (same uvicorn settings, event loop, HTTP parser, access log).
FLOOR_APP = """
import json, sys, time, anyio
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from paragen.serve.server import bind, run_server
TOKENS, DELAY = %d, %f
HEAD = {"id": "x", "created": 0, "model": "scripted"}
REPLY = {**HEAD, "object": "chat.completion",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok"},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 1, "completion_tokens": TOKENS, "total_tokens": TOKENS + 1}}
def chunk(text):
    choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
    return {**HEAD, "object": "chat.completion.chunk", "choices": [choice]}
async def tokens():
    start = time.perf_counter()
    for i in range(TOKENS):
        await anyio.sleep(max(0.0, start + i * DELAY - time.perf_counter()))
        yield {"data": json.dumps(chunk(" tok"))}
    yield {"data": "[DONE]"}
async def chat(request):
    if (await request.json()).get("stream"):
        return EventSourceResponse(tokens())
    await anyio.sleep((TOKENS - 1) * DELAY)
    return JSONResponse(REPLY)
app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
sock = bind("127.0.0.1", 0)
print(f"floor on http://127.0.0.1:{sock.getsockname()[1]}/v1", file=sys.stderr, flush=True)
run_server(app, sock)
"""


# An OTLP/HTTP sink: answers every export with 200 and counts them in a file (read after the rounds, so
# a traced leg that exported nothing is an error, not a fast figure).
SINK_APP = """
import http.server, sys
from pathlib import Path
count = Path(sys.argv[1])
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        count.write_text(str(int(count.read_text() or 0) + 1))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
print(f"sink on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


@contextmanager
def otlp_sink(count: Path) -> Iterator[str]:
    """The sink's URL, for the lifetime of the block."""
    count.write_text("0")
    process = subprocess.Popen(
        [sys.executable, "-c", SINK_APP, str(count)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().split(" on ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextmanager
def server_process(
    script: Path, log: Path, *, floor: bool = False, otlp: str | None = None
) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of ``paragen serve`` (or the floor app) in its own process, logging to ``log``.

    ``paragen serve`` runs with its default options (log level info, access log on), as a user
    starts it; its log goes to a file, as a deployed server's does.
    """
    command = [sys.executable, "-m", "paragen.cli", "serve", "-b", f"scripted:{script}", "--port", "0"]
    if otlp is not None:
        command += ["--otlp-endpoint", otlp]
    if floor:
        command = [sys.executable, "-c", FLOOR_APP % (TOKENS, TOKEN_DELAY_S)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out)
    try:
        url = wait_listening(log, process)
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def wait_listening(log: Path, process: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """The server's base URL once it accepts connections (it logs the URL just before it listens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        match = re.search(r" on (http://\S+/v1)", log.read_text())
        if match is not None:
            host, _, port = match[1].split("://", 1)[1].partition("/")[0].rpartition(":")
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return match[1]
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"the server did not start:\n{log.read_text()}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 where /proc is not there)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    load: LoadProcess, scripted: ScriptedBackend, servers: dict[str, tuple[str, int]]
) -> dict[str, list[tuple[float, float, float]]]:
    """Every leg ROUNDS times, alternating; per leg, per round: (wall, client CPU, server CPU)."""
    serve, floor, traced = servers["serve"], servers["floor"], servers["traced"]
    legs = {
        "http_floor": (floor, "plain"),
        "serve": (serve, "plain"),
        "http_floor_stream": (floor, "stream"),
        "serve_stream": (serve, "stream"),
        "serve_openai": (serve, "openai"),
        "serve_traced": (traced, "plain"),
    }
    for (url, _pid), mode in legs.values():  # warm-up: connections, first-call imports
        load.round(url, mode)
    anyio.run(direct, scripted, backend_options=event_loop_options())
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in LEGS}
    for _ in range(ROUNDS):
        cpu = time.process_time()
        wall = anyio.run(direct, scripted, backend_options=event_loop_options())
        times["direct"].append((wall, 0.0, time.process_time() - cpu))
        for name, ((url, pid), mode) in legs.items():
            before = cpu_seconds(pid)
            wall, client_cpu = load.round(url, mode)
            times[name].append((wall, client_cpu, cpu_seconds(pid) - before))
    return times


def report(times: dict[str, list[tuple[float, float, float]]]) -> None:
    walls = {name: statistics.median(t[0] for t in rounds) for name, rounds in times.items()}
    ideal = TOKENS * TOKEN_DELAY_S
    print(f"{CONCURRENT} concurrent requests of {TOKENS} tokens at {TOKEN_DELAY_S * 1000:.0f} ms/token")
    print(f"(one request alone: {ideal:.3f} s); median of {ROUNDS} rounds; CPU per request in ms:")
    print(f"  {'leg':18s} {'wall':>7s} {'/direct':>8s} {'server':>7s} {'client':>7s}   walls")
    for name, rounds in times.items():
        server = statistics.median(t[2] for t in rounds) / CONCURRENT * 1000
        client = statistics.median(t[1] for t in rounds) / CONCURRENT * 1000
        spread = ", ".join(f"{t[0]:.3f}" for t in rounds)
        ratio = walls[name] / walls["direct"]
        print(f"  {name:18s} {walls[name]:7.3f} {ratio:8.3f} {server:7.2f} {client:7.2f}   ({spread})")
    ratios = {name: round(walls[name] / walls["direct"], 3) for name in LEGS}
    print(
        json.dumps(
            {
                "serve_over_direct_64": ratios["serve"],
                "serve_stream_over_direct_64": ratios["serve_stream"],
                "http_floor_over_direct_64": ratios["http_floor"],
                "http_floor_stream_over_direct_64": ratios["http_floor_stream"],
                "serve_openai_over_direct_64": ratios["serve_openai"],
                "serve_traced_over_direct_64": ratios["serve_traced"],
                "serve_traced_over_serve_64": round(walls["serve_traced"] / walls["serve"], 3),
                "direct_s": round(walls["direct"], 3),
                "serve_s": round(walls["serve"], 3),
            }
        )
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "script.jsonl"
        script.write_text(SCRIPT.model_dump_json() + "\n")
        scripted = ScriptedBackend.from_spec(str(script))
        load = LoadProcess()
        exports = Path(tmp) / "exports"
        try:
            with ExitStack() as stack:
                sink = stack.enter_context(otlp_sink(exports))
                servers = {
                    "serve": stack.enter_context(server_process(script, Path(tmp) / "serve.log")),
                    "floor": stack.enter_context(server_process(script, Path(tmp) / "floor.log", floor=True)),
                    "traced": stack.enter_context(
                        server_process(script, Path(tmp) / "traced.log", otlp=sink)
                    ),
                }
                times = measure(load, scripted, servers)
            if int(exports.read_text()) == 0:  # the traced server has exported at its shutdown at the latest
                raise RuntimeError("the traced server exported no spans")
        finally:
            load.close()
    report(times)


if __name__ == "__main__":
    if sys.argv[1:] == ["--load"]:
        anyio.run(load_main)
    else:
        main()
