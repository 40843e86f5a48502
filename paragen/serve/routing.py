"""From a request to what runs: the strategy (from the model name or the ``paragen`` field),
its n and config, the problem, and the run's sampling defaults.

Model names: a name the backend's model is served under passes through as one sample;
``STRATEGY[-N]/MODEL`` (or just ``STRATEGY[-N]``) runs that strategy with n = N. The
``paragen`` field may name the strategy, n and config instead; where both say something
they must agree, so a request never runs something other than what it asked for.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from paragen.config import Budget
from paragen.errors import ConfigError, invalid_fields
from paragen.registry import STRATEGY_GROUP, load_strategy, names
from paragen.serve.errors import APIError, bad_request, from_paragen, from_validation
from paragen.serve.wire import ChatRequest, CompletionRequest, Message
from paragen.strategy import Strategy, build_strategy, count_field, parallel_samples
from paragen.types import (
    ChatMessage,
    GenerateRequest,
    Problem,
    SamplingParams,
    TextSink,
    ToolOptions,
    ToolVoteRule,
)

AnyRequest = ChatRequest | CompletionRequest
# The strategies serve runs itself, found by their registered names (the core imports no strategy):
# a plain model name's request passed through, sampled once; majority-N with tools, a vote over the
# samples' tool calls. A client cannot name them: they run on the request's own messages.
PASSTHROUGH = "passthrough"
TOOL_VOTE = "tool_vote"
SERVE_OWN = frozenset({PASSTHROUGH, TOOL_VOTE})


@dataclass(slots=True)
class Plan:
    """One request, resolved: everything needed to run it and to answer."""

    id: str
    model: str  # the model name echoed back (as the client wrote it)
    strategy_name: str | None  # None: pass-through
    config: dict[str, Any]
    samples: int  # samples one run asks for (the strategy's n)
    choices: int  # OpenAI's n: independent runs
    problem: Problem
    defaults: SamplingParams
    budget: Budget
    messages: tuple[ChatMessage, ...] | None = None
    prompt: str | None = None
    tools: ToolOptions | None = None  # function calling: forwarded, or voted over (majority)
    tool_vote: ToolVoteRule = "hierarchical"
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.content for m in self.messages or ())

    def strategy(self, on_text: TextSink | None = None, on_reasoning: TextSink | None = None) -> Strategy:
        """A strategy object for one run (pass-through ones carry their own text and thinking sinks)."""
        strategy: Strategy
        if self.strategy_name is None:
            strategy = _serve_own(PASSTHROUGH)(
                messages=self.messages,
                prompt=self.prompt,
                on_text=on_text,
                on_reasoning=on_reasoning,
                tools=self.tools,
            )
        elif self.tools is not None and self.messages is not None:
            options = {**self.config, "rule": self.tool_vote}
            strategy = _serve_own(TOOL_VOTE)(messages=self.messages, tools=self.tools, **options)
        else:
            strategy = build_strategy(self.strategy_name, self.config)
        return strategy


class Router:
    """Resolves requests against the served model names and the installed strategies."""

    def __init__(
        self,
        model_names: tuple[str, ...],
        defaults: SamplingParams,
        budget: Budget,
        tool_vote: ToolVoteRule = "hierarchical",
    ) -> None:
        self.model_names = model_names
        self.tool_vote = tool_vote
        self.defaults = defaults
        self._default_values = defaults.model_dump()  # dumped once, not once per request
        self.budget = budget
        self._strategies = _nameable()

    def strategies(self) -> list[str]:
        return sorted(self._strategies)

    def is_strategy(self, name: str) -> bool:
        if name not in self._strategies:  # one registered at run time since we started
            self._strategies = _nameable()
        return name in self._strategies

    def plan(self, request: AnyRequest) -> Plan:
        options = request.paragen
        named, n_in_name = self._parse_model(request.model)
        strategy_name = _agree("strategy", named, options.strategy, request.model)
        if strategy_name is not None and not self.is_strategy(strategy_name):
            raise bad_request(
                f"unknown strategy {strategy_name!r}; installed: {', '.join(self.strategies())}",
                param="paragen.strategy",
                code="unknown_strategy",
            )
        n = _agree("n", n_in_name, options.n, request.model)
        config = dict(options.config)
        if n is not None and strategy_name is not None:
            field = _count_field(strategy_name, request.model)
            config[field] = _agree("n", config.get(field), n, request.model)
        if strategy_name is None and (config or n is not None):
            raise bad_request(
                "paragen.n and paragen.config need a strategy (a model name like "
                "'majority-8/MODEL' or paragen.strategy)",
                param="paragen",
            )
        plan_id = f"{'chatcmpl' if isinstance(request, ChatRequest) else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        plan = Plan(
            id=plan_id,
            model=request.model,
            strategy_name=strategy_name,
            config=config,
            samples=1,
            choices=request.n,
            problem=_problem(request, plan_id),
            defaults=self._defaults(request),
            budget=self._budget(options.budget),
        )
        if isinstance(request, ChatRequest):
            plan.messages = tuple(_chat_message(m) for m in request.messages)
            plan.tools = _tools(request, strategy_name)
            plan.tool_vote = options.tool_vote or self.tool_vote
        else:
            plan.prompt = request.prompt
        _check_generate_request(plan)
        plan.samples = self._samples(plan)
        return plan

    def _parse_model(self, name: str) -> tuple[str | None, int | None]:
        """(strategy, n) named by the model name; (None, None) for a served model."""
        if name in self.model_names:
            return None, None
        head, slash, model = name.partition("/")
        strategy, n_text = self._split_n(head)
        served = not slash or model in self.model_names
        if not self.is_strategy(strategy):
            what = (
                f"unknown strategy {strategy!r} in model name {name!r}"
                if slash and served
                else f"unknown model {name!r}"
            )
            raise _model_not_found(f"{what}; strategies: {', '.join(self.strategies())}", self.model_names)
        if not served:
            raise _model_not_found(f"model {model!r} is not served here", self.model_names)
        if n_text is None:
            return strategy, None
        if not n_text.isdigit() or int(n_text) < 1:
            raise bad_request(
                f"bad n {n_text!r} in model name {name!r}: write STRATEGY-N with N a positive integer",
                param="model",
                code="invalid_n",
            )
        return strategy, int(n_text)

    def _split_n(self, head: str) -> tuple[str, str | None]:
        if self.is_strategy(head):
            return head, None
        strategy, dash, n_text = head.rpartition("-")
        return (strategy, n_text) if dash else (head, None)

    def _defaults(self, request: AnyRequest) -> SamplingParams:
        asked = request.sampling()
        if not asked:
            return self.defaults
        try:
            return SamplingParams.model_validate({**self._default_values, **asked})
        except ValidationError as exc:
            raise from_validation(exc) from None

    def _budget(self, asked: Budget) -> Budget:
        """The request's budget, each limit no looser than the server's own."""
        if not asked.model_fields_set:  # the request set no limit: the server's budget as it is
            return self.budget
        merged: dict[str, Any] = {}
        for name in Budget.model_fields:
            mine, theirs = getattr(self.budget, name), getattr(asked, name)
            merged[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return Budget(**merged)

    @staticmethod
    def _samples(plan: Plan) -> int:
        """How many samples one run may have running at once (see ``parallel_samples``); the
        strategy is built once here to validate its config."""
        if plan.strategy_name is None:  # a pass-through: one sample, nothing to validate
            return 1
        try:
            return parallel_samples(plan.strategy())
        except ConfigError as exc:
            raise from_paragen(exc, param="paragen.config") from None


def _nameable() -> set[str]:
    """The installed strategies a request may name (not the two serve runs on its own)."""
    return set(names(STRATEGY_GROUP)) - SERVE_OWN


def _agree(what: str, first: Any, second: Any, model: str) -> Any:
    if first is not None and second is not None and first != second:
        raise bad_request(
            f"the request names two values of {what} ({first!r} and {second!r}); model {model!r}",
            param=f"paragen.{what}",
            code="conflicting_parameters",
        )
    return first if first is not None else second


@functools.cache
def _serve_own(name: str) -> Any:
    """passthrough's or tool_vote's class, looked up once per process: a lookup reads every installed
    package's entry points, more work than the rest of a short request."""
    return load_strategy(name)


def _count_field(strategy: str, model: str) -> str:
    """The config field N sets (``n``; Hogwild!'s ``workers``), as the CLI's ``-n`` does."""
    field = count_field(load_strategy(strategy))
    if field is None:
        raise bad_request(
            f"strategy {strategy!r} has no n, so N in {model!r} (or paragen.n) does not apply; "
            "set its own fields in paragen.config",
            param="model",
            code="invalid_n",
        )
    return field


def _tools(request: ChatRequest, strategy: str | None) -> ToolOptions | None:
    """The request's function calling: for a pass-through, or a majority vote over tool calls."""
    tools = request.tool_options()
    if tools is not None and strategy not in (None, "majority"):
        raise bad_request(
            f"tools work with a plain model name (passed through) or majority-N/MODEL (a vote over "
            f"the tool calls), not with strategy {strategy!r}",
            param="tools",
            code="unsupported_parameter",
        )
    return tools


def _model_not_found(message: str, served: tuple[str, ...]) -> APIError:
    return APIError(
        404,
        f"{message}. Models: {', '.join(served)}; or STRATEGY[-N]/MODEL, e.g. majority-8/{served[0]}",
        param="model",
        code="model_not_found",
    )


def _chat_message(message: Message) -> ChatMessage:
    role = "system" if message.role == "developer" else message.role
    return ChatMessage(role=role, content=message.text())


def _check_generate_request(plan: Plan) -> None:
    """What a pass-through sends must be a valid backend request; say so now, not mid-run."""
    try:
        GenerateRequest(messages=plan.messages, prompt=plan.prompt, params=plan.defaults, tools=plan.tools)
    except ValidationError as exc:
        raise bad_request(invalid_fields(exc)[0].message, param="messages") from None


def _problem(request: AnyRequest, problem_id: str) -> Problem:
    """The question a strategy answers: the prompt, the one user message, or the conversation."""
    if isinstance(request, CompletionRequest):
        question = request.prompt
    elif len(request.messages) == 1 and request.messages[0].role == "user":
        question = request.messages[0].text()
    else:
        question = "\n\n".join(f"{m.role.capitalize()}: {m.text()}" for m in request.messages)
    try:
        return Problem(id=problem_id, question=question)
    except ValidationError as exc:
        param = "prompt" if isinstance(request, CompletionRequest) else "messages"
        raise bad_request(f"{param}: {invalid_fields(exc)[0].message}", param=param) from None
