"""``paragen serve`` as a real subprocess: it serves, keeps its key secret, refuses bad flags with
exit code 2 and one line, and ``paragen --help`` does not import the ASGI stack or torch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import openai
import pytest

from paragen.serve.server import bind

HEAVY = ["torch", "vllm", "starlette", "uvicorn", "sse_starlette", "transformers"]


def paragen(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paragen.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"]])
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    code = (
        "import sys\nfrom paragen.cli import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr
    if args == ["serve", "--help"]:
        assert "--api-key-env" in out.stdout and "--max-samples" in out.stdout


KEY = "pg-test-key-0123456789"


def start(command: list[str], env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen[str]]:
    """A server started by ``command``, once it has printed its base URL on stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"on (http://\S+/v1)", line)
    assert match, line + process.stderr.read()
    return match[1], process


SERVE = [sys.executable, "-m", "paragen.cli", "serve", "-b", "scripted", "--port", "0"]


@pytest.fixture
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    # A key read from a file or a secret store often ends in a newline: it is stripped.
    url, process = start([*SERVE, "--api-key-env", "PG_SERVE_KEY"], {"PG_SERVE_KEY": f" {KEY}\n"})
    yield url, process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_serves_and_never_shows_the_key(server: tuple[str, subprocess.Popen[str]]) -> None:
    url, process = server
    with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0) as client:
        reply = client.chat.completions.create(
            model="majority-3/scripted", messages=[{"role": "user", "content": "2+3"}], seed=0
        )
    assert reply.choices[0].message.content and "\\boxed{5}" in reply.choices[0].message.content
    with (
        pytest.raises(openai.AuthenticationError),
        openai.OpenAI(base_url=url, api_key=KEY[:-1], max_retries=0) as bad,
    ):
        bad.models.list()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert KEY not in out + err
    assert "POST /v1/chat/completions" in out, out  # the access log (method, path, status: no header)


def test_no_access_log() -> None:
    url, process = start([*SERVE, "--no-access-log"])
    try:
        assert httpx.get(f"{url}/models", timeout=30).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0 and "GET /v1/models" not in out + err, out + err


LOOP_APP = """
import asyncio, contextlib
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from paragen.serve.server import bind, listen, run_server
async def loop(request):
    return PlainTextResponse(type(asyncio.get_running_loop()).__module__)
@contextlib.asynccontextmanager
async def slow_start(app):
    await asyncio.sleep(1)  # uvicorn accepts only after this: a request sent meanwhile must queue
    yield
sock = bind("127.0.0.1", 0)
listen(sock)
print(f"on http://127.0.0.1:{sock.getsockname()[1]}/v1", flush=True, file=__import__("sys").stderr)
run_server(Starlette(routes=[Route("/v1/loop", loop)], lifespan=slow_start), sock, log_level="warning")
"""


def test_served_on_uvloop_where_installed() -> None:
    """Also: a request sent as soon as the URL is announced is served, not refused, while the
    server still starts (the socket listens before the announcement)."""
    pytest.importorskip("uvloop")
    url, process = start([sys.executable, "-c", LOOP_APP])
    try:
        assert httpx.get(f"{url}/loop", timeout=30).text.startswith("uvloop")
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0


def _taken_port() -> tuple[str, object]:
    sock = bind("127.0.0.1", 0)
    sock.listen()
    return str(sock.getsockname()[1]), sock


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["-b", "nosuch"], {}, "unknown backend 'nosuch'"),
        (["-b", "scripted", "--api-key-env", "PG_NOT_SET"], {}, "PG_NOT_SET, which is not set"),
        (
            ["-b", "scripted", "--api-key-env", "PG_BLANK"],
            {"PG_BLANK": " \n"},
            "PG_BLANK, which is not set or empty",
        ),
        (["-b", "scripted", "--max-runs", "0"], {}, "bad value for --max-runs"),
        (["-b", "scripted", "--temperature", "-2"], {}, "bad value for --temperature"),
        (["-b", "scripted", "--port", "nope"], {}, "'--port'"),
        (["-b", "scripted", "--host", "256.1.1.1"], {}, "cannot listen on 256.1.1.1"),
        (["-b", "scripted", "--port", "99999"], {}, "bad port 99999: it must be 0-65535"),
        (["-b", "scripted", "--port", "-1"], {}, "bad port -1"),
        (["-b", "scripted", "--log-level", "nope"], {}, "bad --log-level 'nope'"),
        (["-b", "scripted", "--tool-vote", "nope"], {}, "bad value for --tool-vote"),
        (["-b", "scripted", "--scorer", "bogus:x"], {}, "bad value for --scorer: unknown scorer 'bogus:x'"),
    ],
)
def test_bad_flags_exit_2_with_one_line(args: list[str], env: dict[str, str], message: str) -> None:
    out = paragen("serve", *args, env=env)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_taken_port_exits_2() -> None:
    port, sock = _taken_port()
    out = paragen("serve", "-b", "scripted", "--port", port)
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out.stderr, out.stderr
    sock.close()  # type: ignore[attr-defined]
