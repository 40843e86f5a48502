"""Majority vote over function calls: what ``paragen serve`` runs for ``majority-N/MODEL`` on a
request with ``tools`` (registered as ``tool_vote``).

N samples of the client's own messages (without them, the question as one user message), each
offered the tools, vote. A sample's ballot is
its tool calls (in order) or, if it made none, "text". The rule (``paragen.tool_vote``, or
the server's ``--tool-vote``) says what makes two ballots the same:

- ``name``: the called functions' names; the winner's reply is the first sample (lowest
  index) that cast the winning ballot;
- ``arguments``: names and arguments, the arguments compared as canonical JSON (key order
  and spacing do not matter);
- ``hierarchical`` (default): names first, then, among the samples that called the winning
  names, names and arguments.

Ties go to the ballot first cast (the lowest sample index). Errored or cancelled samples do
not vote. A text winner answers with the first text sample's text. The counts are in the
result's ``details["tool_vote"]``, which serve puts in ``choices[i].paragen.vote``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.types import ChatMessage, Problem, StrategyResult, ToolOptions, ToolVoteRule, Trace

Key = tuple[Any, ...]


class ToolVoteConfig(StrategyConfig):
    n: int = Field(default=8, ge=1, le=1024, description="samples to vote over")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")
    rule: ToolVoteRule = "hierarchical"


@dataclass(frozen=True, slots=True)
class Ballot:
    trace: Trace
    names: Key  # ("text",) for a sample that made no call
    calls: Key  # names with canonical arguments; ("text",) likewise


def ballot(trace: Trace) -> Ballot:
    calls = trace.tool_calls or []
    if not calls:
        return Ballot(trace, ("text",), ("text",))
    names = tuple(name_of(c) for c in calls)
    return Ballot(trace, ("calls", names), ("calls", tuple((name_of(c), arguments_of(c)) for c in calls)))


@dataclass(slots=True)
class Tally:
    """Ballots grouped by a key, in the order each key was first cast."""

    groups: dict[Key, list[Ballot]]

    @classmethod
    def of(cls, ballots: Sequence[Ballot], key: Callable[[Ballot], Key]) -> Tally:
        groups: dict[Key, list[Ballot]] = {}
        for item in ballots:
            groups.setdefault(key(item), []).append(item)
        return cls(groups)

    def winner(self) -> Key:
        # max() keeps the first of equal counts: a tie goes to the ballot first cast.
        return max(self.groups, key=lambda k: len(self.groups[k]))

    def summary(self, with_arguments: bool) -> list[dict[str, Any]]:
        return [_option(key, len(items), with_arguments) for key, items in self.groups.items()]


def vote(traces: Sequence[Trace], rule: ToolVoteRule) -> tuple[Trace | None, dict[str, Any]]:
    """The winning sample and the vote's counts (``None`` when no sample voted)."""
    ballots = [ballot(t) for t in sorted(traces, key=lambda t: t.id) if t.is_ok]
    summary: dict[str, Any] = {"rule": rule, "voters": len(ballots)}
    if not ballots:
        return None, {**summary, "votes": [], "winner": None}
    first = Tally.of(ballots, (lambda b: b.calls) if rule == "arguments" else (lambda b: b.names))
    top = first.winner()
    summary["votes"] = first.summary(with_arguments=rule == "arguments")
    summary["winner"] = list(first.groups).index(top)
    winners = first.groups[top]
    if rule == "hierarchical" and top != ("text",):
        second = Tally.of(winners, lambda b: b.calls)
        summary["argument_votes"] = second.summary(with_arguments=True)
        winners = second.groups[second.winner()]
    return winners[0].trace, summary


def _option(key: Key, count: int, with_arguments: bool) -> dict[str, Any]:
    if key == ("text",):
        return {"kind": "text", "count": count}
    if with_arguments:
        calls = [{"name": name, "arguments": arguments} for name, arguments in key[1]]
        return {"kind": "tool_calls", "calls": calls, "count": count}
    return {"kind": "tool_calls", "names": list(key[1]), "count": count}


class ToolVote(BaseStrategy[ToolVoteConfig]):
    """n samples of the client's messages with its tools; the vote's winner is the reply."""

    name = "majority"  # what the client asked for (majority-N/MODEL); registered as tool_vote
    Config = ToolVoteConfig

    def __init__(
        self,
        config: ToolVoteConfig | None = None,
        *,
        messages: Sequence[ChatMessage] | None = None,
        tools: ToolOptions | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, **overrides)
        self.messages = messages
        self.tools = tools

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        params: dict[str, Any] = {} if cfg.temperature is None else {"temperature": cfg.temperature}
        messages = self.messages or [ChatMessage(role="user", content=problem.question)]
        request = ctx.request(messages=messages, **params).model_copy(update={"tools": self.tools})
        traces: list[Trace] = []
        async with ctx.fanout(request, n=cfg.n) as fan:
            async for trace in fan:
                traces.append(trace)
        winner, summary = vote(traces, cfg.rule)
        calls = None if winner is None else winner.tool_calls
        result = ctx.finish(_answer(calls), text=None if winner is None or calls else winner.text)
        result.tool_calls = calls
        result.details = {"tool_vote": summary}
        return result


def name_of(call: dict[str, Any]) -> str:
    return str((call.get("function") or {}).get("name", ""))


def arguments_of(call: dict[str, Any]) -> str:
    return canonical_arguments(str((call.get("function") or {}).get("arguments", "")))


def canonical_arguments(arguments: str) -> str:
    """The arguments as canonical JSON (keys sorted, no spaces); text that is not JSON, stripped."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _answer(calls: list[dict[str, Any]] | None) -> str | None:
    """The winning calls in one line, as the run's answer: ``name(arguments)``, ``; ``-joined."""
    if not calls:
        return None
    return "; ".join(f"{name_of(c)}({arguments_of(c)})" for c in calls)


__all__ = ["ToolVote", "ToolVoteConfig", "canonical_arguments", "vote"]
