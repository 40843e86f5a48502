"""vLLM's router (``vllm-router --policy consistent_hash``) in front of the suite's one `vllm serve`
of SmolLM2, with paragen's ``gateway=vllm-router`` option: the gateway tests of
test_gateways_real.py (there in front of llama-servers) against vLLM itself.

The witness is vLLM's own /metrics, never paragen's accounting:

- a problem's n samples through the router reuse its prompt: vLLM's prefix-cache hits rise by all
  but one sample's full blocks of the prompt;
- FFS's cancel of the losing sample reaches vLLM through the router: vLLM finished one request (the
  winner; this vLLM counts no aborted request in ``vllm:request_success``, whose "abort" label
  stays at 0) and generated a small part of what the loser would have run to, with nothing left
  running;
- the router and `vllm serve` straight give the same records (greedy).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from real_servers import Server, start_gateway
from uneven_ffs import WINNER_TOKENS, UnevenFFS

from paragen import Orchestrator, Problem
from paragen.backends.openai import OpenAIBackend
from paragen.types import SamplingParams, StrategyResult
from strategies.majority import Majority

pytestmark = [pytest.mark.server, pytest.mark.vllm_server, pytest.mark.anyio, pytest.mark.timeout(300)]

NO_EOS = {"ignore_eos": True}  # vLLM's extra: run to max_tokens unless stopped
# A question of several of vLLM's 128-token KV blocks (its CPU default), so that its prompt has full
# blocks to cache; the sentence makes it no other test's prompt.
LONG = "A farmer counts sheep in a field near the river, and writes each count down. " * 12


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def router(vllm_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """vLLM's router in front of the shared `vllm serve` (its one worker)."""
    server = start_gateway("vllm-router", [vllm_server], tmp_path_factory.mktemp("router") / "router.log")
    yield server
    server.stop()


def through(router: Server, **options: object) -> OpenAIBackend:
    return OpenAIBackend.from_spec(router.url, api_key_env=None, gateway="vllm-router", **options)


async def test_a_problem_s_samples_through_the_router_reuse_its_prompt(
    router: Server, vllm_server: Server
) -> None:
    n = 4
    backend = through(router)
    before = vllm_server.wait_idle()
    try:
        orchestrator = Orchestrator(backend, defaults=SamplingParams(max_tokens=4, temperature=0.7, seed=1))
        result = await orchestrator.run(Majority(n=n), Problem(question=f"{LONG} How many sheep?"))
    finally:
        await backend.aclose()
    after = vllm_server.wait_idle()
    done = {k: after[k] - before.get(k, 0.0) for k in after}
    prompt = result.traces[0].prompt_tokens
    full_blocks = prompt // 128 * 128
    print(
        f"\nrouter, {n} samples of a {prompt}-token prompt: vLLM's prefix cache "
        f"{done['vllm:prefix_cache_hits_total']:.0f} hits of {done['vllm:prefix_cache_queries_total']:.0f} "
        f"queried tokens, {done['vllm:prompt_tokens_total']:.0f} prompt tokens"
    )
    assert result.error is None and len(result.traces) == n and full_blocks > 0
    assert done["vllm:prefix_cache_hits_total"] >= (n - 1) * full_blocks


class LongerLoserFFS(UnevenFFS):
    """vLLM ignores the loser's end-of-text: it could run 1000 tokens."""

    loser_tokens = 1000


LOSER_TOKENS = LongerLoserFFS.loser_tokens


async def test_a_first_finish_cancel_through_the_router_aborts_on_vllm(
    router: Server, vllm_server: Server
) -> None:
    backend = through(router, extra_body=NO_EOS)
    strategy = LongerLoserFFS(LongerLoserFFS.Config(n=2, allow_truncated=True, require_answer=False))
    before = vllm_server.wait_idle()
    try:
        defaults = SamplingParams(temperature=0.0)
        result = await Orchestrator(backend, defaults=defaults).run(
            strategy, Problem(question="What is 9 + 4?")
        )
    finally:
        await backend.aclose()
    after = vllm_server.wait_idle(timeout=10.0)
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    finished = after["vllm:request_success_total"] - before["vllm:request_success_total"]
    print(f"\nrouter FFS: vLLM generated {generated:.0f} tokens, finished {finished:.0f} requests")
    winner, loser = sorted(result.traces, key=lambda t: t.status != "ok")
    assert (winner.status, winner.completion_tokens, loser.status) == ("ok", WINNER_TOKENS, "cancelled")
    assert after["vllm:num_requests_running"] == 0
    assert finished == 1  # the winner: the loser ended by abort, which vLLM does not count there
    assert generated < WINNER_TOKENS + LOSER_TOKENS / 10


async def test_the_router_and_vllm_straight_give_the_same_records(
    router: Server, vllm_server: Server
) -> None:
    problems = [
        Problem(id="add", question="What is 12 + 30?"),
        Problem(id="mul", question="What is 6 times 7?"),
    ]
    defaults = SamplingParams(max_tokens=8, temperature=0.0)
    straight = OpenAIBackend.from_spec(vllm_server.url, api_key_env=None)
    backend = through(router)
    try:
        by_server = await Orchestrator(straight, defaults=defaults).run_many(Majority(n=2), problems)
        by_router = await Orchestrator(backend, defaults=defaults).run_many(Majority(n=2), problems)
    finally:
        await straight.aclose()
        await backend.aclose()
    assert _records(by_server) == _records(by_router)


def _records(results: list[StrategyResult]) -> list[tuple[str | None, list[str], list[int]]]:
    return [(r.answer, [t.text for t in r.traces], [t.completion_tokens for t in r.traces]) for r in results]
