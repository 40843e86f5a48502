"""``paragen serve --named-backend NAME=SPEC``: a request's strategy reads with the named backend
(``reader=NAME``), samples on the served one; a name the server lacks is a 400 in the server's
words; the app closes every backend at shutdown; bad flags are one line and exit code 2."""

from __future__ import annotations

import signal
import sys

import httpx
import pytest
from test_serve_cli import paragen, start

from paragen.backends.scripted import ScriptedBackend, arithmetic_responder
from paragen.serve import ServeConfig, create_app, serve_in_thread
from paragen.types import GenerateRequest

Q = [{"role": "user", "content": "What is 7 + 5?"}]


class _Closing(ScriptedBackend):
    closed = False

    async def aclose(self) -> None:
        self.closed = True


def _verdict(request: GenerateRequest, index: int) -> str:
    return "The second is right.\nJudgment: 1"


def _ask(url: str, reader: str) -> httpx.Response:
    config = {"reader": reader}
    body = {
        "model": "genselect-2/scripted",
        "messages": Q,
        "paragen": {"config": config, "include_result": True},
    }
    return httpx.post(url + "/chat/completions", json=body, timeout=30)


def test_a_request_reads_with_the_named_backend() -> None:
    main, judge = _Closing(arithmetic_responder), _Closing(_verdict)
    app = create_app(main, ServeConfig(model_names=("scripted",)), backends={"judge": judge})
    with serve_in_thread(app) as url:
        reply = _ask(url, "judge")
        missing = _ask(url, "other")
    assert reply.status_code == 200, reply.text
    labels = [t["label"] for t in reply.json()["choices"][0]["paragen"]["result"]["traces"]]
    assert labels == ["candidates", "candidates", "select0"]
    assert sum(s.request.n for s in main.streams) == 2 and len(judge.streams) == 1
    assert judge.streams[0].request.messages and "candidate solutions" in str(
        judge.streams[0].request.messages[0].content
    )
    error = missing.json()["error"]
    assert missing.status_code == 400 and error["param"] == "paragen.config"
    assert (
        "reads with backend 'other', which was not given (this server's named backends: judge)"
        in error["message"]
    )
    assert sum(s.request.n for s in main.streams) == 2  # refused before any sample
    assert main.closed and judge.closed  # both closed when the app shut down


def test_the_command_serves_a_named_backend() -> None:
    url, process = start([sys.executable, "-m", "paragen.cli", "serve", "-b", "scripted", "--port", "0",
                          "--named-backend", "judge=scripted"])  # fmt: skip
    try:
        reply = _ask(url, "judge")
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert reply.status_code == 200, reply.text
    traces = reply.json()["choices"][0]["paragen"]["result"]["traces"]
    assert [t["label"] for t in traces][-1] == "select0" and process.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--named-backend", "openai:http://u:sk-secret-99@h/v1"],
            "bad --named-backend 'openai:http://h/v1'",
        ),
        (
            ["--named-backend", "j=scripted", "--named-backend", "j=scripted"],
            "--named-backend names 'j' twice",
        ),
        (["--named-backend", "judge=nosuch"], "--named-backend judge: unknown backend 'nosuch'"),
    ],
)
def test_bad_named_backends_exit_2_with_one_line(args: list[str], message: str) -> None:
    out = paragen("serve", "-b", "scripted", "--port", "0", *args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "sk-secret-99" not in out.stderr + out.stdout
