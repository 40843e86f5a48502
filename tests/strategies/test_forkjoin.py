"""forkjoin: the grammar's parsing and joining, and timed fork/join runs on the scripted backend."""

from __future__ import annotations

import re

import pytest
from strategy_helpers import PROBLEM, SYNC, run, samples

from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.config import Budget
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams, Trace
from strategies._fork_grammar import MULTIVERSE, THREADWEAVER
from strategies.forkjoin import ForkJoin

# The trunk as a ThreadWeaver model writes it, one segment per fork (each cut at "</Outlines>").
SEGMENTS = [
    "Plan first. <Parallel>\n<Outlines>\n<Outline>1: add</Outline>\n<Outline>2: check</Outline>\n"
    "<Outline>3: bound</Outline>\n</Outlines> never sent",
    "</Parallel>\nOne more split. <Parallel>\n<Outlines>\n<Outline>1: a</Outline>\n"
    "<Outline>2: b</Outline>\n</Outlines> never sent",
    "</Parallel>\nSo the answer is \\boxed{5}.",
]
CHILD_TOKENS = {(1, "1"): 4, (1, "2"): 9, (1, "3"): 6, (2, "1"): 5, (2, "2"): 2}
CHILD_DELAY = 0.01
_CHILD_HEAD = re.compile(r"\n<Thread>\n([0-9.]+):$")


def _child_text(fork: int, label: str) -> str:
    body = "".join(f" f{fork}t{label}w{i}" for i in range(CHILD_TOKENS[fork, label]))
    return body + "</Thread>\nnever sent"


def _respond(request: GenerateRequest, index: int) -> Script:
    """The trunk's next segment, or a child's thread: which one, read off the prefilled reply."""
    messages = request.messages or ()
    prefill = messages[-1].content if request.continue_final else ""
    head = _CHILD_HEAD.search(prefill)
    if head is not None:
        fork = prefill.count("</Outlines>")
        return Script(text=_child_text(fork, head[1]), token_delay=CHILD_DELAY)
    return Script(text=SEGMENTS[prefill.count("</Outlines>")], token_delay=0.001)


def _cut(text: str, stop: str) -> str:
    return text[: text.index(stop)] if stop in text else text


def _by_fork(result_traces: list[Trace]) -> list[list[Trace]]:
    children = [t for t in result_traces if t.label == "child"]
    firsts = sorted({min(t.parents) for t in children})
    return [[t for t in children if min(t.parents) == p] for p in firsts]


def test_threadweaver_outlines_parse_in_order_once_each() -> None:
    segment = (
        "x <Parallel>\n<Outlines>\n<Outline>1: a</Outline>\n<Outline> 2.1 : b</Outline>"
        "<Outline>1: again</Outline>"
    )
    assert THREADWEAVER.child_labels(segment) == ["1", "2.1"]


def test_malformed_outlines_are_defined() -> None:
    # No outline block at all: the segment did not stop to fork (it ended).
    assert THREADWEAVER.child_labels("The answer is 5.") is None
    # A block closed inside the segment is history, not a fork.
    closed = "<Outlines>\n<Outline>1: a</Outline>\n</Outlines> later text"
    assert THREADWEAVER.child_labels(closed) is None
    # An open block with no numbered entry: a malformed fork (empty), written back as plain text.
    assert THREADWEAVER.child_labels("<Parallel>\n<Outlines>\n<Outline>first: a</Outline>\n") == []
    assert THREADWEAVER.child_labels("<Outlines>\n") == []


def test_joins_follow_each_grammar() -> None:
    pairs = [("1", " x"), ("2", " y")]
    assert THREADWEAVER.join(pairs) == "\n<Thread>\n1: x</Thread><Thread>\n2: y</Thread>\n"
    assert THREADWEAVER.child_start("2") == "\n<Thread>\n2:"
    cut = THREADWEAVER.join(pairs, cut_off=True)
    assert cut == "\n<Thread>\n1: x</Thread><Thread>\n2: y</Thread>\n</Parallel>"
    assert MULTIVERSE.join(pairs) == "\n<Path>\n1: x</Path>\n<Path>\n2: y</Path>\n"
    assert MULTIVERSE.child_labels("<Goal>\n<Outline>1: a</Outline>\n<Outline>2: b</Outline>") == ["1", "2"]


@pytest.mark.anyio
async def test_two_forks_run_their_children_at_once_and_join_them_in_order() -> None:
    backend = ScriptedBackend(_respond, capabilities=SYNC)
    result, _ = await run(ForkJoin(), backend)
    trunk = [_cut(s, "</Outlines>") for s in SEGMENTS]
    kids = {k: _cut(_child_text(*k), "</Thread>") for k in CHILD_TOKENS}
    fork1 = THREADWEAVER.join([(label, kids[1, label]) for label in "123"])
    fork2 = THREADWEAVER.join([(label, kids[2, label]) for label in "12"])
    expected = trunk[0] + "</Outlines>" + fork1 + trunk[1] + "</Outlines>" + fork2 + trunk[2]
    assert result.text == expected and result.answer == "5"
    forks = _by_fork(samples(result))
    assert [len(f) for f in forks] == [3, 2]
    for children in forks:  # every child of a fork ran while its siblings ran
        assert max(t.start for t in children) < min(t.end or 0 for t in children)
    critical = sum(len(tokenize(s)) for s in trunk) + 9 + 5
    total = sum(len(tokenize(s)) for s in trunk) + sum(CHILD_TOKENS.values())
    assert result.metrics["critical_path_tokens"] == critical == result.usage.sequential_tokens
    assert result.metrics["total_tokens"] == total == result.usage.total_tokens
    assert result.metrics["forks"] == 2 and result.metrics["children"] == 5
    # Wall time of the critical path: at least the longest child of each fork, token by token.
    assert result.metrics["critical_path_s"] >= (8 + 4) * CHILD_DELAY


@pytest.mark.anyio
async def test_the_trunk_after_a_fork_waits_for_every_child() -> None:
    result, backend = await run(ForkJoin(), ScriptedBackend(_respond, capabilities=SYNC))
    trunks = [t for t in samples(result) if t.label == "trunk"]
    first_fork = _by_fork(samples(result))[0]
    assert sorted(trunks[1].parents) == sorted(t.id for t in first_fork)
    assert trunks[1].start >= max(t.end or 0 for t in first_fork)
    # Children stop at the thread's end; the trunk at the fork marker.
    stops = sorted({s.request.params.stop for s in backend.streams})
    assert stops == [("</Outlines>",), ("</Thread>",)]


@pytest.mark.anyio
async def test_a_deadline_mid_fork_cancels_the_children() -> None:
    def respond(request: GenerateRequest, index: int) -> Script:
        script = _respond(request, index)
        # Children far too slow for the deadline: they are mid-fork when it passes.
        return (
            script.model_copy(update={"first_delay": 30.0}) if script.token_delay == CHILD_DELAY else script
        )

    backend = ScriptedBackend(respond, capabilities=SYNC)
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=512), budget=Budget(deadline_s=0.3))
    result = await orch.run(ForkJoin(), PROBLEM)
    assert result.stop_reason == "deadline"
    children = [t for t in samples(result) if t.label == "child"]
    assert len(children) == 3 and {t.status for t in children} == {"cancelled"}
    assert len(backend.streams) == 4 and all(s.closed is not None for s in backend.streams)
    assert all((s.closed or 0) - s.opened < 5.0 for s in backend.streams)


@pytest.mark.anyio
async def test_an_outline_block_without_entries_is_kept_as_text_and_the_trunk_goes_on() -> None:
    segments = ["Think. <Parallel>\n<Outlines>\nnone here\n</Outlines> cut", "</Parallel>\n\\boxed{5}"]
    backend = ScriptedBackend(
        lambda request, _i: (
            segments[(request.messages or ())[-1].content.count("</Outlines>")]
            if request.continue_final
            else segments[0]
        ),
        capabilities=SYNC,
    )
    result, _ = await run(ForkJoin(), backend)
    assert result.text == _cut(segments[0], " cut") + segments[1]
    assert result.metrics["forks"] == 0 and result.metrics["malformed_forks"] == 1
    assert result.answer == "5" and len(samples(result)) == 2


@pytest.mark.anyio
async def test_no_forks_allowed_decodes_the_trunk_as_one_sample() -> None:
    result, _ = await run(ForkJoin(max_forks=0), ScriptedBackend(_respond, capabilities=SYNC))
    assert result.text == SEGMENTS[0] and result.metrics["forks"] == 0
    assert len(samples(result)) == 1


@pytest.mark.anyio
async def test_a_child_cut_off_closes_the_parallel_block_and_ends_the_run() -> None:
    result, _ = await run(ForkJoin(child_tokens=5), ScriptedBackend(_respond, capabilities=SYNC))
    assert (result.text or "").endswith("</Thread>\n</Parallel>") and result.metrics["forks"] == 1
    cut = [t for t in samples(result) if t.label == "child" and t.finish_reason == "length"]
    assert len(cut) == 2  # the 9- and 6-token threads of the first fork
    assert not [t for t in samples(result) if t.label == "trunk" and t.parents]
