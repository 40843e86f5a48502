"""Scripted search trees for the search strategies' tests: next steps by prefix, scores by step text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from strategy_helpers import PROBLEM

from paragen.backends.base import Capabilities
from paragen.backends.scripted import FanoutOrder, Script, ScriptedBackend
from paragen.orchestrator import Orchestrator
from paragen.scoring import Scorers, ScriptedScorer
from paragen.strategy import Strategy
from paragen.types import GenerateRequest, SamplingParams, StrategyResult, Trace

VERIFIER = "scripted:test"
DELAY = 0.002  # seconds per word token, unless a step says otherwise
Step = str | tuple[str, float]  # a step's text, or its text and its token delay
Tree = Mapping[tuple[str, ...], Sequence[Step]]


def steps_so_far(request: GenerateRequest) -> tuple[str, ...]:
    """The steps a request continues (its prefilled assistant reply, split at blank lines)."""
    messages = request.messages or ()
    if not request.continue_final:
        return ()
    return tuple(s for s in messages[-1].content.split("\n\n") if s.strip())


def tree_backend(tree: Tree, caps: Capabilities | None = None, *, seed: int | None = None) -> ScriptedBackend:
    """The k-th sample that continues steps S writes ``tree[S][k]`` (cycling when there are fewer):
    samples are numbered per prefix, fan-out by fan-out in the order the fan-outs open, and within
    one by choice (not in the order their streams open: trio starts a fan-out's samples in any).

    With the run's ``seed``, the sample of seed ``seed + k`` writes ``tree[S][k]`` instead: a search
    seeds its samples in path order, so fan-outs that open at once on one prefix (particle
    filtering's, one per particle) are told apart by path, not by the order the loop opened them."""
    orders: dict[tuple[str, ...], FanoutOrder] = {}

    def respond(request: GenerateRequest, index: int) -> Script | str:
        prefix = steps_so_far(request)
        steps = [step if isinstance(step, tuple) else (step, DELAY) for step in tree[prefix]]
        scripts = [Script(text=text, token_delay=delay) for text, delay in steps]
        if seed is not None:
            assert request.params.seed is not None, "a seeded tree needs seeded requests"
            return scripts[(request.params.seed - seed) % len(scripts)]
        if prefix not in orders:
            orders[prefix] = FanoutOrder(scripts)
        return orders[prefix](request, index)

    return ScriptedBackend(respond, capabilities=caps)


async def run_search(
    strategy: Strategy,
    tree: Tree | ScriptedBackend,
    scores: Mapping[str, float] | ScriptedScorer,
    *,
    seed: int | None = None,
    max_tokens: int = 256,
) -> tuple[StrategyResult, ScriptedBackend, ScriptedScorer]:
    backend = tree if isinstance(tree, ScriptedBackend) else tree_backend(tree)
    scorer = scores if isinstance(scores, ScriptedScorer) else ScriptedScorer(scores, latency=0.005)
    orch = Orchestrator(
        backend,
        defaults=SamplingParams(max_tokens=max_tokens, seed=seed),
        scorers=Scorers({VERIFIER: scorer}),
    )
    return await orch.run(strategy, PROBLEM), backend, scorer


def by_text(result: StrategyResult) -> dict[str, Trace]:
    """The step samples by their text (each text is written once in these trees)."""
    return {t.text: t for t in result.traces if t.kind == "sample"}


def score_traces(result: StrategyResult) -> list[Trace]:
    return [t for t in result.traces if t.kind == "score"]
