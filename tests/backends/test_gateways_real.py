"""The gateways themselves, on loopback: SGLang's Model Gateway (``smg launch``) and vLLM's router
(``vllm-router``), each in front of two real llama.cpp servers (``llama-server``, SmolLM2), with
paragen's ``gateway=`` option naming it. The commands are docs/openai-backend.md's ("Past one
machine"); ``real_servers.GATEWAY_POLICIES`` holds their policy flags.

Every witness is the servers' own: each replica's ``/metrics`` (requests it is processing, prompt
tokens it served from its cache, tokens it generated) and its log (one "processing task" line per
request it took), never paragen's accounting. What is checked, per gateway:

- a problem's n samples all land on one replica, which serves their shared prompt from its cache
  (without the key, SGLang's sends them where its fallback says, and vLLM's router puts every
  problem on one replica);
- many problems spread over both replicas;
- FFS's cancel of the losing sample reaches the server through the gateway: it stops decoding;
- a prefilled reply is continued through vLLM's router and refused through SGLang's gateway (it
  drops ``add_generation_prompt``, and llama-server refuses the continuation);
- a replica killed (SIGKILL) mid-run: each gateway ends the cut streams (neither resumes one);
  through vLLM's router paragen resumes them, the continuations reach the live replica and no
  record is lost; through SGLang's the cut samples are lost, since it cannot carry a continuation;
- paragen's own pool over the same two replicas and the gateway give the same records (greedy).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from real_servers import GATEWAY_POLICIES, SERVED_NAME, Server, start_gateway, start_llama_server
from uneven_ffs import WINNER_TOKENS, UnevenFFS

from paragen import Orchestrator, Problem
from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import BackendHTTPError
from paragen.types import ChatMessage, GenerateRequest, SamplingParams, StrategyResult
from strategies.majority import Majority

pytestmark = [pytest.mark.server, pytest.mark.anyio, pytest.mark.timeout(300)]

GATEWAYS = sorted(GATEWAY_POLICIES)
PROBLEMS = [
    Problem(id="add", question="What is 12 + 30?"),
    Problem(id="mul", question="What is 6 times 7?"),
]
# SmolLM2's end-of-text tokens, banned where a sample must run to its max_tokens unless stopped.
NO_EOS = {"logit_bias": {"0": -100.0, "2": -100.0}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def start_replicas(folder: Path) -> list[Server]:
    """Two llama-servers of SmolLM2, two slots each (a problem's samples decode two at a time)."""
    servers: list[Server] = []
    try:
        for name in ("a", "b"):
            servers.append(start_llama_server(folder / f"{name}.log", flags=["--metrics"], slots=2))
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Server]]:
    servers = start_replicas(tmp_path_factory.mktemp("gateway-replicas"))
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture(scope="module", params=GATEWAYS)
def gateway(
    request: pytest.FixtureRequest, replicas: list[Server], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Server]]:
    name: str = request.param
    server = start_gateway(name, replicas, tmp_path_factory.mktemp(name) / "gateway.log")
    yield name, server
    server.stop()


# What paragen is told of the servers behind each gateway. vLLM's router passes the workers' own
# /v1/models through, so the probe finds llama-server; SGLang's lists a model of its own ("unknown",
# owned by "local"), so the kind (one request per sample, as llama-server takes them) and the model
# are said. That llama-server continues a prefilled reply is not: through SGLang's gateway it cannot
# (test_a_prefilled_reply_is_continued_through_vllm_s_router_and_refused_through_sglang_s).
OPTIONS: dict[str, dict[str, Any]] = {
    "sglang": {"server": "llama_cpp", "model": SERVED_NAME},
    "vllm-router": {},
}


def through(name: str, server: Server, **options: Any) -> OpenAIBackend:
    """paragen's client of the gateway, naming it (its routing key on every request)."""
    return OpenAIBackend.from_spec(server.url, api_key_env=None, gateway=name, **OPTIONS[name], **options)


class Snapshot:
    """A replica's counters and log length at one moment; ``since`` gives what it did after."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.metrics = server.metrics()
        self.log_size = server.log.stat().st_size

    def since(self) -> dict[str, float]:
        now = self.server.metrics()
        done = {k.removeprefix("llamacpp:"): now[k] - self.metrics.get(k, 0.0) for k in now}
        with self.server.log.open("rb") as log:
            log.seek(self.log_size)
            text = log.read().decode(errors="replace")
        done["tasks"] = float(text.count("processing task"))
        done["requests_processing"] = now.get("llamacpp:requests_processing", 0.0)
        return done


def snapshots(servers: list[Server]) -> list[Snapshot]:
    return [Snapshot(s) for s in servers]


def wait_idle(servers: list[Server], timeout: float = 10.0) -> None:
    """Until no replica processes a request (each says so on /metrics)."""
    deadline = time.monotonic() + timeout
    while any(s.metrics().get("llamacpp:requests_processing", 0) for s in servers):
        assert time.monotonic() < deadline, "a replica is still processing"
        time.sleep(0.05)


# --- a: a problem's samples on one replica, its prompt from that replica's cache ---------------------


async def test_a_problem_s_samples_land_on_one_replica_that_caches_their_prompt(
    gateway: tuple[str, Server], replicas: list[Server]
) -> None:
    name, server = gateway
    backend = through(name, server)
    try:
        orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=12, temperature=0.7, seed=1))
        # Questions no other test sends, so what the replicas cached is this problem's own prompt.
        for problem in (p.model_copy(update={"question": f"{p.question} ({name})"}) for p in PROBLEMS):
            before = snapshots(replicas)
            result = await orchestrator.run(Majority(n=4), problem)
            wait_idle(replicas)
            done = [b.since() for b in before]
            assert result.error is None and len(result.traces) == 4
            print(f"\n{name} {problem.id}: " + "; ".join(_served(d) for d in done))
            assert sorted(d["tasks"] for d in done) == [0, 4]  # all four on one replica
            home = max(range(2), key=lambda i: done[i]["tasks"])
            # Two slots: two samples prefill the prompt, the next two find it in their slot's cache.
            assert done[home]["prompt_tokens_cached_total"] > 0
    finally:
        await backend.aclose()


async def test_without_the_key_a_problem_s_samples_scatter_or_every_problem_shares_one_replica(
    gateway: tuple[str, Server], replicas: list[Server]
) -> None:
    # The contrast to the test above, without gateway=: SGLang's manual policy sends a request
    # without x-smg-routing-key where its fallback says, so a problem's six samples at once land on
    # both replicas (for both problems on one each, a random pick would have a 1-in-1024 chance);
    # vLLM's consistent_hash hashes every request without x-session-id to one fixed worker.
    name, server = gateway
    backend = OpenAIBackend.from_spec(server.url, api_key_env=None, **OPTIONS[name])
    spread = []
    try:
        orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=4, temperature=0.7, seed=1))
        for problem in PROBLEMS:
            before = snapshots(replicas)
            result = await orchestrator.run(Majority(n=6), problem)
            wait_idle(replicas)
            tasks = [b.since()["tasks"] for b in before]
            print(f"\n{name} without the key, {problem.id}: requests per replica {tasks}")
            assert result.error is None and sum(tasks) == 6
            spread.append(tasks)
    finally:
        await backend.aclose()
    if name == "sglang":
        assert any(min(tasks) > 0 for tasks in spread)
    else:
        assert spread[0] == spread[1] and sorted(spread[0]) == [0, 6]


def _served(done: dict[str, float]) -> str:
    return (
        f"{done['tasks']:.0f} requests, {done['prompt_tokens_total']:.0f} prompt tokens prefilled, "
        f"{done['prompt_tokens_cached_total']:.0f} from cache, {done['tokens_predicted_total']:.0f} generated"
    )


async def test_problems_spread_over_both_replicas(
    gateway: tuple[str, Server], replicas: list[Server]
) -> None:
    # Each key takes a worker of its own (SGLang's: a random one; vLLM's: its place on the hash
    # ring), so twelve problems all on one of two replicas would be a 1-in-2048 chance.
    name, server = gateway
    problems = [Problem(id=f"s{i}", question=f"What is {i} + {i}?") for i in range(12)]
    backend = through(name, server)
    before = snapshots(replicas)
    try:
        orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=1, temperature=0.0))
        results = await orchestrator.run_many("single", problems)
    finally:
        await backend.aclose()
    wait_idle(replicas)
    tasks = [b.since()["tasks"] for b in before]
    print(f"\n{name}: 12 problems, requests per replica {tasks}")
    assert all(r.error is None for r in results)
    assert sum(tasks) == 12 and min(tasks) > 0


# --- b: FFS's cancel reaches the server through the gateway ----------------------------------------


LOSER_TOKENS = UnevenFFS.loser_tokens


async def test_a_first_finish_cancel_stops_the_loser_on_the_server(
    gateway: tuple[str, Server], replicas: list[Server]
) -> None:
    name, server = gateway
    backend = through(name, server, extra_body=NO_EOS)
    strategy = UnevenFFS(UnevenFFS.Config(n=2, allow_truncated=True, require_answer=False))
    before = snapshots(replicas)
    try:
        defaults = SamplingParams(temperature=0.0)
        result = await Orchestrator(backend, defaults=defaults).run(strategy, PROBLEMS[0])
    finally:
        await backend.aclose()
    wait_idle(replicas, timeout=2.0)  # the loser is not decoding on: no replica is busy
    done = [b.since() for b in before]
    print(f"\n{name} FFS: " + "; ".join(_served(d) for d in done))
    winner, loser = sorted(result.traces, key=lambda t: t.status != "ok")
    assert (winner.status, winner.completion_tokens, loser.status) == ("ok", WINNER_TOKENS, "cancelled")
    assert sorted(d["tasks"] for d in done) == [0, 2]
    generated = sum(d["tokens_predicted_total"] for d in done)
    # The servers generated what paragen saw of the loser and a few tokens in flight, nowhere near
    # the LOSER_TOKENS it would have run to had the gateway not carried the cancel.
    assert generated < WINNER_TOKENS + LOSER_TOKENS / 4
    await anyio.sleep(0.5)
    assert sum(d["tokens_predicted_total"] for d in (b.since() for b in before)) == generated


# --- c: a replica killed mid-run --------------------------------------------------------------------

KILL_TOKENS = 48


async def _kill_when_decoding(replicas: list[Server], killed: list[int]) -> None:
    """SIGKILL the first replica seen decoding a sample (a few tokens in), as a crash would."""
    async with httpx.AsyncClient() as client:
        while not killed:
            for i, server in enumerate(replicas):
                slots = (await client.get(f"{server.root}/slots")).json()
                if any(s["is_processing"] and s["next_token"][0]["n_decoded"] >= 4 for s in slots):
                    server.kill()
                    killed.append(i)
                    return
            await anyio.sleep(0.02)


@pytest.mark.parametrize("name", GATEWAYS)
async def test_a_replica_killed_mid_run(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.mktemp(f"kill-{name}")
    replicas = start_replicas(folder)
    try:
        server = start_gateway(name, replicas, folder / "gateway.log")
    except BaseException:  # a skip included: the replicas are this test's to stop
        for replica in replicas:
            replica.stop()
        raise
    backend = through(name, server, extra_body=NO_EOS)
    killed: list[int] = []
    try:
        before = snapshots(replicas)
        defaults = SamplingParams(max_tokens=KILL_TOKENS, temperature=0.0)
        async with anyio.create_task_group() as group:
            group.start_soon(_kill_when_decoding, replicas, killed)
            results = await Orchestrator(backend, defaults=defaults).run_many(Majority(n=2), PROBLEMS)
            group.cancel_scope.cancel()
        (dead,) = killed
        live = before[1 - dead].since()
    finally:
        await backend.aclose()
        server.stop()
        for replica in replicas:
            replica.stop()
    traces = [t for r in results for t in r.traces]
    print(f"\n{name}, replica {dead} killed; the live one: {_served(live)}")
    print(f"samples: {[(t.status, t.completion_tokens) for t in traces]}")
    done = [t for t in traces if t.status == "ok"]
    assert all(t.completion_tokens == KILL_TOKENS for t in done)  # end-of-text banned: whole samples
    if name == "vllm-router":
        # No record lost: the cut samples were resumed through the router, whose retries on the dead
        # worker opened its circuit breaker, so the continuations went to the live one. Each
        # generated only the rest of its sample (a retry from the start would make 4 x KILL_TOKENS),
        # and the live replica took four requests: its own samples and the continuations, or four
        # continuations.
        assert len(done) == 4 and live["tasks"] == 4
        assert live["tokens_predicted_total"] < 4 * KILL_TOKENS
    else:
        # The samples cut mid-stream (SGLang's gateway breaks off the chunked body) are lost:
        # paragen cannot resume a chat reply through it (see the test below). The others, a sample
        # queued on the dead replica included (retried from the start, nothing of it seen), were
        # generated whole on the live replica.
        cut = [t for t in traces if t.status == "error"]
        assert cut and all((t.error or "").startswith("BackendConnectionError") for t in cut)
        assert live["tokens_predicted_total"] == KILL_TOKENS * len(done)


async def test_a_prefilled_reply_is_continued_through_vllm_s_router_and_refused_through_sglang_s(
    gateway: tuple[str, Server],
) -> None:
    # A continuation as paragen sends it (vLLM's continue_final_message with add_generation_prompt
    # off, which llama-server takes too). SGLang's gateway re-encodes the body through its own
    # request type and drops add_generation_prompt, and llama-server then refuses the request.
    name, server = gateway
    backend = through(name, server)
    messages = (
        ChatMessage(role="user", content="Count from 1 to 10."),
        ChatMessage(role="assistant", content="1, 2, 3, 4,"),
    )
    request = GenerateRequest(
        messages=messages, continue_final=True, params=SamplingParams(max_tokens=4, temperature=0.0)
    )
    try:
        if name == "vllm-router":
            [completion] = await generate(backend, request)
            assert completion.text.strip().startswith("5")
        else:
            with pytest.raises(BackendHTTPError, match=r"400.*add_generation_prompt"):
                await generate(backend, request)
    finally:
        await backend.aclose()


# --- d: paragen's pool and the gateway agree ------------------------------------------------------


async def test_the_pool_and_the_gateway_give_the_same_records(
    gateway: tuple[str, Server], replicas: list[Server]
) -> None:
    name, server = gateway
    first, second = replicas
    pool = OpenAIBackend.from_spec(first.url, base_urls=[second.url], api_key_env=None)
    backend = through(name, server)
    defaults = SamplingParams(max_tokens=16, temperature=0.0)
    try:
        by_pool = await Orchestrator(pool, defaults=defaults).run_many(Majority(n=2), PROBLEMS)
        by_gateway = await Orchestrator(backend, defaults=defaults).run_many(Majority(n=2), PROBLEMS)
    finally:
        await pool.aclose()
        await backend.aclose()
    assert _records(by_pool) == _records(by_gateway)


def _records(results: list[StrategyResult]) -> list[tuple[str | None, list[str], list[int]]]:
    return [(r.answer, [t.text for t in r.traces], [t.completion_tokens for t in r.traces]) for r in results]
