"""/metrics, read with prometheus_client's own text parser, moves as scripted runs dictate.

The outer ``paragen serve`` runs over paragen's OpenAI backend and a pool of two inner ``paragen
serve`` replicas (scripted backends, real HTTP on loopback): one answers its first token after 1.5 s,
so a sample sent there is hedged to the other, which wins. Each series is checked against what the
runs themselves report (their ``StrategyResult`` with ``include_result``), not against constants alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from conftest import serving
from prometheus_client.parser import text_string_to_metric_families

from paragen.backends.openai import OpenAIBackend
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.types import GenerateRequest, RunUsage, StrategyResult

Q = [{"role": "user", "content": "What is 7 + 5?"}]


def quick(request: GenerateRequest, index: int) -> Script:
    words = " ".join(["step"] * (3 + 4 * ((request.params.seed or 0) % 4)))
    return Script(text=f"{words} so \\boxed{{12}}.", token_delay=0.01)


def late(request: GenerateRequest, index: int) -> Script:
    return Script(text="late \\boxed{12}.", first_delay=1.5, token_delay=0.01)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    reply = httpx.get(url.removesuffix("/v1") + "/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


@pytest.fixture
def pool_server() -> Iterator[tuple[str, OpenAIBackend]]:
    with serving(ScriptedBackend(late)) as slow, serving(ScriptedBackend(quick)) as fast:
        backend = OpenAIBackend.from_spec(
            slow, base_urls=[fast], model="scripted", api_key_env=None, hedge_after_s=0.1, backoff=0.0
        )
        with serving(backend, close_backend=True, max_samples_per_request=8) as url:
            yield url, backend


def ask(url: str, model: str, **paragen: Any) -> StrategyResult:
    body = {"model": model, "messages": Q, "seed": 1, "paragen": {"include_result": True, **paragen}}
    reply = httpx.post(url + "/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return StrategyResult.model_validate(reply.json()["choices"][0]["paragen"]["result"])


def test_metrics_follow_the_runs_and_equal_their_accounting(pool_server: tuple[str, OpenAIBackend]) -> None:
    url, backend = pool_server
    before = scrape(url)
    assert (
        value(before, "paragen_runs_running") == 0
        and value(before, "paragen_tokens_total", kind="generated") == 0
    )
    ffs = ask(url, "ffs-4/scripted")  # the first to finish wins; the other three are cancelled
    budget = ask(url, "majority-4/scripted", budget={"max_total_tokens": 6})
    rejected = httpx.post(url + "/chat/completions", json={"model": "majority-9/scripted", "messages": Q})
    assert rejected.status_code == 400  # it can never be served: not a 429 to retry
    after = scrape(url)

    assert ffs.stop_reason == "done" and budget.stop_reason == "budget"
    assert value(after, "paragen_runs_total", strategy="ffs", outcome="done") == 1
    assert value(after, "paragen_runs_total", strategy="majority", outcome="budget") == 1
    assert value(after, "paragen_requests_rejected_total", limit="max_samples") == 1
    cancelled = [t for r in (ffs, budget) for t in r.traces if t.status == "cancelled"]
    assert (
        value(after, "paragen_samples_cancelled_total", reason="first-finish") == ffs.usage.num_cancelled == 3
    )
    assert value(after, "paragen_samples_cancelled_total", reason="budget") == budget.usage.num_cancelled > 0
    assert total(after, "paragen_samples_total", status="cancelled") == len(cancelled)
    assert total(after, "paragen_samples_total") == ffs.usage.num_samples + budget.usage.num_samples

    both = [ffs.usage, budget.usage]
    kinds: dict[str, Callable[[RunUsage], int]] = {
        "generated": lambda u: u.total_tokens,
        "prompt": lambda u: u.prompt_tokens,
        "wasted": lambda u: u.wasted_tokens,
        "hedged": lambda u: u.hedged_tokens,
        "judge": lambda u: u.judge_tokens,
    }
    for kind, of in kinds.items():
        assert value(after, "paragen_tokens_total", kind=kind) == sum(of(u) for u in both), kind
    assert value(after, "paragen_hedges_total") == sum(u.num_hedges for u in both) > 0

    slow, fast = (r.url for r in backend.pool.replicas)
    assert value(after, "paragen_replica_hedges_won_total", replica=fast) >= 1  # a sample sent to slow
    assert value(after, "paragen_replica_hedges_won_total", replica=slow) == 0
    sent = [r.num_requests for r in backend.pool.replicas]
    assert [value(after, "paragen_replica_requests_total", replica=u) for u in (slow, fast)] == sent
    assert (
        value(after, "paragen_replica_up", replica=slow)
        == value(after, "paragen_replica_up", replica=fast)
        == 1
    )
    assert value(after, "paragen_replica_errors_total", replica=slow) == 0

    assert value(after, "paragen_run_latency_seconds_count", strategy="ffs") == 1
    assert value(after, "paragen_run_latency_seconds_sum", strategy="ffs") == pytest.approx(
        ffs.usage.latency_s
    )
    assert value(after, "paragen_time_to_first_token_seconds_count", strategy="majority") == 1
    assert value(after, "paragen_runs_running") == value(after, "paragen_samples_running") == 0


def test_a_client_that_leaves_counts_as_a_cancelled_run(serve: Any) -> None:
    endless = ScriptedBackend(lambda request, index: Script(text=" ".join(["tok"] * 5000), token_delay=0.01))
    with serve(endless) as url:
        body = {"model": "majority-2/scripted", "messages": Q, "stream": True}
        with httpx.stream("POST", url + "/chat/completions", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if '"sample_started"' in line and scrape(url)[("paragen_samples_running", ())] == 2:
                    break
        deadline = 50
        while value(scrape(url), "paragen_runs_total", strategy="majority", outcome="cancelled") == 0:
            deadline -= 1
            assert deadline, "the cancelled run was not counted"
            httpx.get(url.removesuffix("/v1") + "/health")
        after = scrape(url)
        assert value(after, "paragen_runs_running") == value(after, "paragen_samples_running") == 0
        assert value(after, "paragen_samples_cancelled_total", reason="abandoned") == 2
        generated = value(after, "paragen_tokens_total", kind="generated")
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
        assert generated == health["completion_tokens_total"] > 0  # the tokens it had, up to the cancel
