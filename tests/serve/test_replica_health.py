"""A replica that is down when the server starts is checked in the background, not per request."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import counting_responder, serving

from paragen.backends.openai import OpenAIBackend
from paragen.backends.scripted import ScriptedBackend
from paragen.serve.server import bind

Q = [{"role": "user", "content": "What is 7 + 5?"}]


class Silent:
    """A replica that takes connections and never answers: each probe of it waits for its timeout."""

    def __init__(self) -> None:
        self.sock = bind("127.0.0.1", 0)
        self.sock.listen(64)
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)  # held open, never read, never answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    replica = Silent()
    yield replica
    replica.close()


def test_a_dead_replica_is_checked_in_the_background_and_requests_stay_fast(silent: Silent) -> None:
    with serving(ScriptedBackend(counting_responder)) as live:
        outer = OpenAIBackend.from_spec(
            silent.url, base_urls=[live], model="scripted", api_key_env=None, read_timeout=3.0, backoff=0.0
        )
        outer.pool.health_interval = 0.2
        with serving(outer, close_backend=True) as url:  # starts once the probe of the dead one gave up
            dead = outer.pool.replicas[0]
            assert not dead.is_up and dead.info is None
            probes_at_start = len(silent.connections)
            for _ in range(4):
                started = time.monotonic()
                reply = httpx.post(
                    url + "/chat/completions", json={"model": "majority-2/scripted", "messages": Q}
                )
                assert reply.status_code == 200, reply.text
                assert time.monotonic() - started < 1.5  # no request waits on the dead replica's 3 s
            deadline = time.monotonic() + 10
            while len(silent.connections) <= probes_at_start + 1:  # checked again, with no request
                assert time.monotonic() < deadline, "the dead replica was not checked in the background"
                time.sleep(0.05)
            assert dead.num_requests == 0
