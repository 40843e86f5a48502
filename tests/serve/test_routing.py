"""Model names and ``paragen`` fields to plans, and answers to the wire format: plain functions, no server."""

from __future__ import annotations

from typing import Any

import pytest

from paragen.config import Budget
from paragen.serve import replies
from paragen.serve.errors import APIError
from paragen.serve.routing import Router
from paragen.serve.wire import ChatRequest, CompletionRequest
from paragen.types import RunUsage, SamplingParams, StrategyResult, Trace

Q = [{"role": "user", "content": "What is 7 + 5?"}]


def router(**budget: Any) -> Router:
    return Router(("smollm2", "Org/Model-1B"), SamplingParams(temperature=0.3), Budget(**budget))


def plan_of(**body: Any) -> Any:
    return router().plan(ChatRequest.model_validate({"messages": Q, **body}))


@pytest.mark.parametrize(
    ("model", "strategy", "samples"),
    [
        ("smollm2", None, 1),
        ("Org/Model-1B", None, 1),  # a served name with a slash passes through whole
        ("ffs-8/smollm2", "ffs", 8),
        ("majority/smollm2", "majority", 8),  # the strategy's own default n
        ("best_of_n-3/Org/Model-1B", "best_of_n", 3),
        ("ffs_k-6", "ffs_k", 6),  # no model part: the served model
    ],
)
def test_model_names(model: str, strategy: str | None, samples: int) -> None:
    plan = plan_of(model=model)
    assert plan.strategy_name == strategy and plan.samples == samples and plan.model == model


@pytest.mark.parametrize(
    ("model", "field", "samples"),
    [
        ("hogwild-2/smollm2", "workers", 2),
        ("hogwild_text-3/smollm2", "workers", 3),
        ("majority-4/smollm2", "n", 4),
        ("pdr-4/smollm2", "width", 4),  # the first round's drafts: parallelism (4, 2, 1)
    ],
)
def test_n_in_the_name_sets_the_count_field(model: str, field: str, samples: int) -> None:
    """N sets each strategy's own count field, as the CLI's -n does (Hogwild!'s workers)."""
    plan = plan_of(model=model)
    assert plan.config == {field: samples} and plan.samples == samples
    assert plan_of(model="smollm2", paragen={"strategy": "hogwild", "n": 3}).config == {"workers": 3}


def test_n_for_a_strategy_without_one_is_one_clear_400() -> None:
    with pytest.raises(APIError, match="'sr' has no n") as caught:
        plan_of(model="sr-4/smollm2")
    assert caught.value.status == 400 and caught.value.code == "invalid_n"


@pytest.mark.parametrize(
    ("model", "config", "samples"),
    [
        ("hogwild-4/smollm2", {}, 4),
        ("pdr/smollm2", {}, 4),  # its widest round: parallelism (4, 2, 1)
        ("pdr-8/smollm2", {}, 8),  # width 8: parallelism (8, 4, 2, 1)
        ("pdr/smollm2", {"parallelism": [3, 1], "draft_strategy": "majority", "draft_options": {"n": 5}}, 15),
        ("adaptive_consistency-16/smollm2", {"batch": 2}, 2),  # one batch at a time
    ],
)
def test_samples_count_what_runs_at_once(model: str, config: dict[str, object], samples: int) -> None:
    """--max-samples counts what a strategy really runs in parallel, composites included."""
    assert plan_of(model=model, paragen={"config": config}).samples == samples


def test_paragen_field_and_name_must_agree() -> None:
    assert plan_of(model="smollm2", paragen={"strategy": "ffs", "n": 2}).samples == 2
    assert plan_of(model="ffs-4/smollm2", paragen={"n": 4, "config": {"n": 4}}).samples == 4
    with pytest.raises(APIError, match="two values of n "):
        plan_of(model="ffs-4/smollm2", paragen={"n": 5})


def test_request_sampling_overrides_server_defaults() -> None:
    plan = plan_of(model="smollm2", top_p=0.5, stop="\n\n", max_completion_tokens=9)
    assert plan.defaults.temperature == 0.3 and plan.defaults.top_p == 0.5
    assert plan.defaults.stop == ("\n\n",) and plan.defaults.max_tokens == 9


def test_budget_is_never_looser_than_the_servers() -> None:
    tight = router(deadline_s=5.0).plan(
        ChatRequest.model_validate(
            {"model": "smollm2", "messages": Q, "paragen": {"budget": {"deadline_s": 60}}}
        )
    )
    assert tight.budget.deadline_s == 5.0


def test_conversation_becomes_one_question_for_strategies() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is 7 + 5?"}]},
    ]
    plan = router().plan(ChatRequest.model_validate({"model": "majority/smollm2", "messages": messages}))
    assert plan.problem.question == "System: Be brief.\n\nUser: What is 7 + 5?"
    assert plan.messages is not None and [m.role for m in plan.messages] == ["system", "user"]


def test_completion_prompt() -> None:
    plan = router().plan(CompletionRequest.model_validate({"model": "smollm2", "prompt": "1, 2, 3,"}))
    assert plan.prompt == "1, 2, 3," and plan.messages is None and plan.problem.question == "1, 2, 3,"


def test_usage_extension_sums_every_generated_token() -> None:
    traces = [
        Trace(id=0, completion_tokens=10, prompt_tokens=4, status="ok"),
        Trace(id=1, completion_tokens=3, prompt_tokens=4, status="cancelled"),
        Trace(id=2, kind="judge", completion_tokens=2, prompt_tokens=5),
    ]
    usage = RunUsage(total_tokens=13, prompt_tokens=13, sequential_tokens=10, wasted_tokens=3, judge_tokens=7)
    result = StrategyResult(strategy="x", problem_id="p", answer="1", traces=traces, usage=usage)
    body = replies.usage([result])
    assert body["completion_tokens"] == 15 and body["prompt_tokens"] == 13 and body["total_tokens"] == 28
    assert body["paragen"]["sequential_tokens"] == 10 and body["paragen"]["wasted_tokens"] == 3


def test_plain_request_runs_on_the_servers_own_settings() -> None:
    """A request that sets no sampling field and no budget is not re-validated into copies of the
    server's settings on every request (the pass-through's hot path): it gets them as they are."""
    served = router(deadline_s=5.0)
    plan = served.plan(ChatRequest.model_validate({"model": "smollm2", "messages": Q}))
    assert plan.defaults is served.defaults and plan.budget is served.budget and plan.samples == 1
    limited = served.plan(
        ChatRequest.model_validate({"model": "smollm2", "messages": Q, "paragen": {"budget": {}}})
    )
    assert limited.budget == served.budget


@pytest.mark.parametrize("kind", [ChatRequest, CompletionRequest])
@pytest.mark.parametrize("text", ["tok", " two words\n", 'quote " and \\ backslash', "\x00é\u2028日本", ""])
def test_content_chunks_from_the_template_are_the_chunks(kind: Any, text: str) -> None:
    field = {"messages": Q} if kind is ChatRequest else {"prompt": "What is 7 + 5?"}
    plan = router().plan(kind.model_validate({"model": "smollm2", **field}))
    fast = replies.ContentChunks(plan, 1700000000, 2)
    assert fast(text) == replies.chunk(plan, 1700000000, 2, text=text)


@pytest.mark.parametrize("name", ["passthrough", "tool_vote"])
def test_the_strategies_serve_runs_itself_are_not_named_by_requests(name: str) -> None:
    assert name not in router().strategies()
    with pytest.raises(APIError, match="unknown"):
        plan_of(model=f"{name}/smollm2")
