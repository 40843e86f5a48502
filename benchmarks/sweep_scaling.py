"""One sweep as 1 and 2 shard processes against a fast fake OpenAI-compatible server on loopback.

The server is benchmarks/openai_backend.py's (its own process; every stream is TOKENS tokens in
chunks of ``--tokens-per-chunk``, continuous usage, no model behind it). The sweep is
``paragen eval -t arith -s majority --n N --limit PROBLEMS -b openai:URL``, run once whole (1
process) and once as ``--shard 1/2`` and ``--shard 2/2`` side by side (2 processes, what
``--procs 2`` starts). Measured for each:

- chunks per second: the sweep's chunks over its streaming window (from the first problem's
  start to the last record, read from the records, so process start-up is not in it);
- the client's CPU time per chunk: the shard processes' CPU time (user + system, from
  ``getrusage``) less that of a start-up run (one problem, one sample), over the chunks.

On a machine whose cores are shared by the server and the clients, 2 processes gain only what
the cores left idle by 1 allow; the CPU time per chunk is what carries over: a client machine
with C cores free for paragen streams about ``C / cpu_per_chunk`` chunks a second with C shards.

    python benchmarks/sweep_scaling.py [--problems 32] [--n 8] [--tokens-per-chunk 1]

The last line printed is JSON: {"chunks_per_s_1": ..., "chunks_per_s_2": ..., ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from openai_backend import TOKENS, events, start_server

ROOT = Path(__file__).resolve().parents[1]


def _command(url: str, out: Path, problems: int, n: int, shard: str | None) -> list[str]:
    command = [sys.executable, "-m", "paragen.cli", "eval", "-t", "arith", "-s", "majority", "--n", str(n),
               "-b", f"openai:{url}", "--limit", str(problems), "--max-tokens", str(TOKENS), "--seed", "0",
               "--offline", "--no-progress", "--no-plot", "--out", str(out)]  # fmt: skip
    return command + ([] if shard is None else ["--shard", shard])


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_shards(url: str, root: Path, problems: int, n: int, procs: int) -> tuple[float, list[Path]]:
    """Run the sweep as ``procs`` shard processes at once; their CPU seconds and run folders."""
    folders = [root / f"{procs}-{i}" for i in range(1, procs + 1)]
    shards = [None] if procs == 1 else [f"{i}/{procs}" for i in range(1, procs + 1)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    before = _children_cpu()
    root.mkdir(parents=True, exist_ok=True)
    logs = [root / f"{procs}-{i}.log" for i in range(1, procs + 1)]
    running = [
        subprocess.Popen(
            _command(url, folder, problems, n, shard),
            env=env,
            cwd=ROOT,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        for folder, shard, log in zip(folders, shards, logs, strict=True)
    ]
    for process, log in zip(running, logs, strict=True):
        if process.wait() != 0:
            raise SystemExit(f"a shard exited {process.returncode}: {log.read_text()[-2000:]}")
    return _children_cpu() - before, folders


def streaming_window(folders: list[Path]) -> float:
    """Seconds from the first problem's start to the last record, over every folder."""
    starts, ends = [], []
    for folder in folders:
        for line in (folder / "records.jsonl").read_text().splitlines():
            record = json.loads(line)
            ends.append(record["recorded_at"])
            starts.append(record["recorded_at"] - record["result"]["usage"]["latency_s"])
    return float(max(ends) - min(starts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    args = parser.parse_args()
    per_stream = len(events(args.tokens_per_chunk)) - 1  # the [DONE] event is no chunk
    chunks = args.problems * args.n * per_stream
    url, server = start_server(args.tokens_per_chunk)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            startup, _ = run_shards(url, root / "startup", 1, 1, 1)
            result: dict[str, float | int] = {}
            for procs in (1, 2):
                cpu, folders = run_shards(url, root, args.problems, args.n, procs)
                window = streaming_window(folders)
                result[f"chunks_per_s_{procs}"] = round(chunks / window)
                result[f"client_cpu_us_per_chunk_{procs}"] = round((cpu - procs * startup) / chunks * 1e6, 1)
                print(f"{procs} process(es): {chunks} chunks in {window:.2f}s, client CPU {cpu:.2f}s "
                      f"(start-up {startup:.2f}s each)")  # fmt: skip
    finally:
        server.terminate()
        server.wait()
    cpu_us = result["client_cpu_us_per_chunk_1"]
    result.update(
        ceiling_chunks_per_s_per_core=round(1e6 / cpu_us) if cpu_us > 0 else 0,
        problems=args.problems,
        n=args.n,
        tokens_per_chunk=args.tokens_per_chunk,
        chunks=chunks,
        cores=os.cpu_count() or 0,
    )
    if cpu_us > 0:
        print(f"client CPU {cpu_us} us a chunk: about {1e6 / cpu_us:,.0f} chunks/s per free client core, "
              f"C cores as C shards (--procs C): C x that, while the servers keep up")  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
