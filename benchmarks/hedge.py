"""Hedged requests against two real llama.cpp servers (llama-cpp-python serving SmolLM2-135M) on
loopback, one of them behind a proxy that holds every EVERY-th response STALL_S seconds before its
first byte: REQUESTS requests of MAX_TOKENS tokens, WORKERS at a time, without hedging and hedged
after HEDGE_S seconds. Prints the latency table (p50, p95, max), the ratios p95 and max without /
with hedging, what the losers cost, and last a JSON line.

    .venv/bin/python benchmarks/hedge.py [REQUESTS [HEDGE_S]]

The proxy and the workload are the test's (tests/backends/stall_proxy.py, test_hedge_llama.py).
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends"))
real_servers: Any = importlib.import_module("real_servers")
stall_proxy: Any = importlib.import_module("stall_proxy")

REQUESTS, WORKERS, MAX_TOKENS, EVERY, STALL_S, HEDGE_S = 64, 2, 8, 4, 2.0, 0.2


async def bench(ports: tuple[int, int], requests: int, hedge_s: float) -> dict[str, Any]:
    await stall_proxy.warm_up(ports, MAX_TOKENS)
    rows, tallies = {}, {}
    for name, hedge in (("no hedging", None), (f"hedge after {hedge_s} s", hedge_s)):
        measured = await stall_proxy.measure(
            ports,
            every=EVERY,
            stall_s=STALL_S,
            hedge_after_s=hedge,
            requests=requests,
            workers=WORKERS,
            max_tokens=MAX_TOKENS,
        )
        rows[name], tallies[name] = stall_proxy.summary(measured.outcomes), measured.tally()
    print(f"{requests} requests, {WORKERS} at a time, {MAX_TOKENS} tokens; every {EVERY}th response of one")
    print(f"of two llama.cpp servers stalled {STALL_S} s before its first byte")
    print(stall_proxy.table(rows))
    off, on = rows.values()
    tally = tallies[f"hedge after {hedge_s} s"]
    print(
        f"losers: {tally['aborted']} hung up on; the servers streamed {tally['aborted_server_chunks']} chunks"
        f" of them, paragen read and counted {on['hedged_tokens']} tokens"
    )
    return {
        "p95_ratio": round(off["p95_s"] / on["p95_s"], 2),
        "max_ratio": round(off["max_s"] / on["max_s"], 2),
        "requests": requests,
        "hedge_after_s": hedge_s,
        "stall_s": STALL_S,
        "off": off,
        "on": on,
        "losers": tally,
    }


def main() -> None:
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else REQUESTS
    hedge_s = float(sys.argv[2]) if len(sys.argv) > 2 else HEDGE_S
    folder = Path(tempfile.mkdtemp(prefix="paragen-hedge-"))
    servers = [real_servers.start_llama(folder / "a.log")]
    try:
        servers.append(real_servers.start_llama(folder / "b.log"))
        first, second = (int(s.url.rsplit(":", 1)[1].split("/")[0]) for s in servers)
        ports = (first, second)
        result = anyio.run(bench, ports, requests, hedge_s)
    finally:
        for server in servers:
            server.stop()
    print(f"p95 without / with hedging: {result['p95_ratio']}, max: {result['max_ratio']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
