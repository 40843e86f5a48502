"""A pool of server replicas: least-outstanding routing with prefix affinity.

Requests go to the replica with the fewest requests in flight, except that requests
sharing an ``affinity`` key (all samples of one problem) stay on the replica that
served the key first, while it has room: that replica's prefix cache already holds
their prompt. "Room" means under ``max_outstanding`` and no more than
``affinity_slack`` requests busier than the least busy replica, so one hot problem
cannot pile everything onto one server.

Health: a replica whose request failed to connect (or was cut off) is marked down and
gets no new requests while another is up; every ``health_interval`` seconds it is due
for a check (the backend asks its /models) and is taken back when it answers.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio


@dataclass(eq=False, slots=True)
class Replica:
    """One server of the pool and what the pool knows about it."""

    url: str
    num_outstanding: int = 0
    num_requests: int = 0
    last_pick: int = -1
    info: Any = None  # the backend's probe result, filled in on first use
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    is_up: bool = True
    check_at: float = 0.0  # monotonic time at which a down replica is due for a health check
    num_failures: int = 0  # times marked down
    num_errors: int = 0  # requests (attempts) that failed on it
    num_hedges_won: int = 0  # hedged copies sent to it that streamed first

    @property
    def root(self) -> str:
        """The server's root URL (vLLM's /tokenize and SGLang's /abort_request live there)."""
        return self.url.removesuffix("/v1")


class Pool:
    """Routes each request to one replica; see the module docstring for the rule."""

    def __init__(
        self,
        urls: list[str],
        *,
        max_outstanding: int | None = None,
        affinity_slack: int = 32,
        max_affinity_keys: int = 4096,
        health_interval: float = 2.0,
    ) -> None:
        assert urls, "a pool needs at least one URL"
        self.replicas = [Replica(url) for url in urls]
        self.health_interval = health_interval
        self.max_outstanding = max_outstanding
        self.affinity_slack = affinity_slack
        self.max_affinity_keys = max_affinity_keys
        self._affinity: OrderedDict[str, Replica] = OrderedDict()
        self._picks = itertools.count()

    def __len__(self) -> int:
        return len(self.replicas)

    def pick(self, affinity: str | None = None, avoid: Replica | None = None) -> Replica:
        """The replica for the next request; ``avoid`` one that just failed, if there is another.

        Replicas marked down are left out while any other is up."""
        up = [r for r in self.replicas if r.is_up] or self.replicas
        candidates = [r for r in up if r is not avoid] or up
        # Ties go to the replica picked longest ago, so an idle pool is filled round-robin.
        least = min(candidates, key=lambda r: (r.num_outstanding, r.last_pick))
        chosen = least
        if affinity is not None:
            pinned = self._affinity.get(affinity)
            if pinned is not None and pinned in candidates and self._has_room(pinned, least):
                chosen = pinned
            self._remember(affinity, chosen)
        chosen.last_pick = next(self._picks)
        return chosen

    def _has_room(self, replica: Replica, least: Replica) -> bool:
        if self.max_outstanding is not None and replica.num_outstanding >= self.max_outstanding:
            return False
        return replica.num_outstanding - least.num_outstanding <= self.affinity_slack

    def _remember(self, key: str, replica: Replica) -> None:
        self._affinity[key] = replica
        self._affinity.move_to_end(key)
        while len(self._affinity) > self.max_affinity_keys:
            self._affinity.popitem(last=False)  # forget the least recently used problem

    def mark_down(self, replica: Replica) -> None:
        """Stop routing to ``replica`` until a health check finds it answering again."""
        replica.is_up = False
        replica.num_failures += 1
        replica.check_at = time.monotonic() + self.health_interval

    def mark_up(self, replica: Replica) -> None:
        replica.is_up = True

    def due_for_check(self) -> list[Replica]:
        """Down replicas whose check is due; each is handed out once per interval."""
        now = time.monotonic()
        due = [r for r in self.replicas if not r.is_up and r.check_at <= now]
        for replica in due:
            replica.check_at = now + self.health_interval
        return due

    @contextmanager
    def lease(self, replica: Replica) -> Iterator[Replica]:
        """Count a request as outstanding on ``replica`` while the block runs."""
        replica.num_outstanding += 1
        replica.num_requests += 1
        try:
            yield replica
        finally:
            replica.num_outstanding -= 1
