"""A routing key per problem, for a gateway in front of the servers.

A gateway that balances replicas by load scatters one problem's samples, and they lose the prompt
prefix the first one cached. Each gateway pins requests to a replica by a key it reads from a
header; paragen sends one key per problem on every request of that problem (samples, probes,
continuations, rounds), taken from the request's ``affinity`` (the problem, see
``RunContext.request``), so a problem's requests land together whatever the gateway's policy
does with requests that carry no key. The key is a short digest: a header value holds no newline,
and the problem's text does not travel in a header.

- ``sglang``: the SGLang Model Gateway (``sglang-router``) reads ``x-smg-routing-key``; it pins
  keyed requests under its ``manual`` policy or with ``--routing-key-override`` on any other.
- ``vllm-router``: vLLM's router reads ``x-session-id`` under its ``consistent_hash`` policy.
- ``dynamo``: NVIDIA Dynamo's frontend reads ``x-dynamo-session-id`` (session affinity with
  ``--router-session-affinity-ttl-secs``). Every request of a problem carries the same session id,
  forked work included, which keeps it on the worker that holds the problem's prefix; no
  parent-session id is sent.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Gateway = Literal["sglang", "vllm-router", "dynamo"]

HEADERS: dict[Gateway, str] = {
    "sglang": "x-smg-routing-key",
    "vllm-router": "x-session-id",
    "dynamo": "x-dynamo-session-id",
}


def routing_key(affinity: str) -> str:
    """The key of a problem's requests: 16 hex digits of its affinity's SHA-256."""
    return "pg-" + hashlib.sha256(affinity.encode()).hexdigest()[:16]


def routing_headers(gateway: Gateway | None, affinity: str | None) -> dict[str, str]:
    """The header a gateway pins a request by (none without a gateway or an affinity)."""
    if gateway is None or affinity is None:
        return {}
    return {HEADERS[gateway]: routing_key(affinity)}
