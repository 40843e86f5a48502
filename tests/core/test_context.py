"""RunContext and Orchestrator on the scripted backend: cancellation, deadlines, budgets, errors, tokens."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from paragen import Budget, Orchestrator, Problem, RunContext, StrategyResult
from paragen._fanout import Fanout
from paragen._ledger import Account, Ledger
from paragen.backends.base import Capabilities
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.strategy import BaseStrategy, StrategyConfig
from paragen.types import GenerateRequest

pytestmark = pytest.mark.anyio
PROBLEM = Problem(id="p1", question="What is 7 + 5?")


def words(k: int, answer: str = "12") -> str:
    """A script text of exactly k tokens whose last token holds the answer."""
    return " ".join(["w"] * (k - 1) + [f"\\boxed{{{answer}}}"])


class FirstFinish(BaseStrategy[StrategyConfig]):
    name = "first_finish_test"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        async with ctx.fanout(ctx.request(prompt=problem.question), n=4) as fan:
            async for trace in fan:
                await fan.cancel("first-finish")
                return ctx.finish("x", text=trace.text)
        return ctx.finish(None)


class DrainAll(BaseStrategy[StrategyConfig]):
    name = "drain_all_test"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        async with ctx.fanout(ctx.request(prompt=problem.question), n=4) as fan:
            async for _ in fan:
                pass
        return ctx.finish("done")


class TwoRounds(BaseStrategy[StrategyConfig]):
    """Round 1: three drafts in parallel; round 2: one refinement after them."""

    name = "two_rounds_test"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        drafts = []
        async with ctx.fanout(ctx.request(prompt=problem.question), n=3) as fan:
            drafts = [t async for t in fan]
        final = await ctx.sample(ctx.request(prompt="refine"), parents=[t.id for t in drafts])
        return ctx.finish("r", text=final.text)


async def test_first_finish_cancels_the_rest_and_closes_their_streams() -> None:
    backend = ScriptedBackend(
        [Script(text=words(k), token_delay=0.01) for k in (5, 20, 30, 40)], order="fanout"
    )
    result = await Orchestrator(backend).run(FirstFinish(), PROBLEM)
    statuses = {t.id: (t.status, t.cancel_reason) for t in result.traces}
    assert statuses[0] == ("ok", None)
    assert all(statuses[i] == ("cancelled", "first-finish") for i in (1, 2, 3))
    assert all(record.closed is not None for record in backend.streams)
    # each cancelled sample was stopped right after the winner's last token (5 tokens at 10 ms)
    assert [t.completion_tokens for t in result.traces[1:]] == [5, 5, 5]
    assert result.usage.total_tokens == 20
    assert result.usage.wasted_tokens == 15
    assert result.usage.sequential_tokens == 5
    assert result.usage.num_cancelled == 3


async def test_accounting_is_exact_for_parallel_then_sequential_rounds() -> None:
    backend = ScriptedBackend(
        [Script(text=words(k), token_delay=0.002) for k in (7, 9, 11, 6)], order="fanout"
    )
    result = await Orchestrator(backend).run(TwoRounds(), PROBLEM)
    assert result.usage.total_tokens == 7 + 9 + 11 + 6
    assert result.usage.sequential_tokens == 11 + 6  # the longest draft, then the refinement
    assert result.usage.wasted_tokens == 0
    assert result.traces[-1].parents == [0, 1, 2]
    starts = [t.start for t in result.traces]
    assert max(starts[:3]) < result.traces[3].start
    assert all(t.end is not None and t.first_token is not None for t in result.traces)


async def test_a_failing_sample_is_recorded_and_its_siblings_finish() -> None:
    scripts = [
        Script(text=words(6), token_delay=0.001),
        Script(text=words(6), fail="http500"),
        Script(text=words(6), token_delay=0.001, fail="reset", fail_after=3),
        Script(text=words(6), token_delay=0.001),
    ]
    result = await Orchestrator(ScriptedBackend(scripts, order="fanout")).run(DrainAll(), PROBLEM)
    by_status = [t.status for t in result.traces]
    assert by_status == ["ok", "error", "error", "ok"]
    assert "500" in (result.traces[1].error or "")
    assert "reset" in (result.traces[2].error or "")
    assert result.traces[2].completion_tokens == 3  # tokens before the reset still count
    assert result.usage.num_errors == 2
    assert result.answer == "done"


async def test_deadline_cuts_the_run_and_marks_running_samples() -> None:
    backend = ScriptedBackend([Script(text=words(200), token_delay=0.01)])
    result = await Orchestrator(backend, budget=Budget(deadline_s=0.1)).run(DrainAll(), PROBLEM)
    assert result.stop_reason == "deadline"
    assert result.answer is None
    assert result.usage.latency_s >= 0.1  # a deadline never fires early; how late is the machine's business
    assert all(t.status == "cancelled" for t in result.traces)
    assert all(0 < t.completion_tokens < 200 for t in result.traces)
    # the scripted backend sent exactly what the traces counted: nothing after the cut
    assert [s.tokens_sent for s in backend.streams] == [t.completion_tokens for t in result.traces]
    assert all(record.closed is not None for record in backend.streams)


async def test_total_token_budget_stops_running_samples() -> None:
    backend = ScriptedBackend([Script(text=words(100), token_delay=0.001)])
    result = await Orchestrator(backend, budget=Budget(max_total_tokens=40)).run(DrainAll(), PROBLEM)
    assert result.stop_reason == "budget"
    assert {t.cancel_reason for t in result.traces} == {"budget"}
    # the budget trips within one token of 40; the other samples may each add at most the token in flight
    assert 40 <= result.usage.total_tokens <= 44


async def test_sequential_budget_clips_max_tokens() -> None:
    backend = ScriptedBackend([Script(text=words(50))])
    result = await Orchestrator(backend, budget=Budget(max_sequential_tokens=10)).run(DrainAll(), PROBLEM)
    assert all(t.completion_tokens == 10 and t.finish_reason == "length" for t in result.traces)


async def test_shared_request_choices_abort_one_by_one() -> None:
    caps = Capabilities(native_n=True, per_choice_abort=True)
    # The winner's 4 tokens at 0-60 ms; the others' at 0, 29, 58 ms, then 87 ms: no token of theirs is
    # due with the winner's last, so how a loop orders tasks woken together (trio shuffles them)
    # cannot let one through before the abort.
    winner = Script(text=words(4), token_delay=0.02)
    backend = ScriptedBackend([winner] + [Script(text=words(30), token_delay=0.029)] * 3, capabilities=caps)
    result = await Orchestrator(backend).run(FirstFinish(), PROBLEM)
    assert len(backend.streams) == 1  # one request served all four choices
    assert sorted(backend.streams[0].aborted) == [1, 2, 3]
    assert [t.status for t in result.traces] == ["ok", "cancelled", "cancelled", "cancelled"]
    # the others had 3 tokens when aborted, right after the winner's last
    assert [t.completion_tokens for t in result.traces] == [4, 3, 3, 3]
    prompts = {t.prompt_tokens for t in result.traces}
    assert len(prompts) == 1 and prompts.pop() > 0  # one prompt per sample, not the request's total
    assert result.usage.cached_prompt_tokens == 3 * result.traces[0].prompt_tokens
    assert [t.cached_prompt_tokens for t in result.traces][1:] == [result.traces[0].prompt_tokens] * 3


async def test_monitor_prunes_a_sample() -> None:
    class Pruner(BaseStrategy[StrategyConfig]):
        name = "pruner_test"

        async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
            def stop_long(live: object) -> str | None:
                return "too-long" if getattr(live, "num_tokens", 0) >= 8 else None

            async with ctx.fanout(ctx.request(prompt="q"), n=2, monitor=stop_long) as fan:
                got = [t async for t in fan]
            return ctx.finish(str(len(got)))

    backend = ScriptedBackend(
        [Script(text=words(5), token_delay=0.001), Script(text=words(50), token_delay=0.001)],
        order="fanout",
    )
    result = await Orchestrator(backend).run(Pruner(), PROBLEM)
    assert [t.status for t in result.traces] == ["ok", "pruned"]
    assert result.traces[1].cancel_reason == "too-long"
    assert result.traces[1].completion_tokens == 8
    assert result.answer == "2"


async def test_checkpoint_yields_running_trace_once() -> None:
    class Peek(BaseStrategy[StrategyConfig]):
        name = "peek_test"

        async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
            seen = []
            async with ctx.fanout(ctx.request(prompt="q"), n=1, checkpoint=3) as fan:
                async for trace in fan:
                    seen.append((trace.end is None, trace.completion_tokens, trace.text))
            assert seen[0][0] and seen[0][1] == 3 and seen[0][2] == "w w w"
            return ctx.finish(str(len(seen)))

    backend = ScriptedBackend([Script(text=words(6), token_delay=0.001)])
    assert (await Orchestrator(backend).run(Peek(), PROBLEM)).answer == "2"


async def test_run_many_keeps_input_order_under_a_limit() -> None:
    backend = ScriptedBackend(lambda r, _i: Script(text=words(3 + len(r.prompt or "")), token_delay=0.001))
    problems = [Problem(id=f"p{i}", question="q" * (10 - i)) for i in range(6)]
    orchestrator = Orchestrator(backend, max_concurrent_problems=2)
    results = await orchestrator.run_many(DrainAll(), problems)
    assert [r.problem_id for r in results] == [p.id for p in problems]
    assert [r.traces[0].completion_tokens for r in results] == [3 + 10 - i for i in range(6)]


async def test_composed_strategy_shares_the_ledger() -> None:
    class Outer(BaseStrategy[StrategyConfig]):
        name = "outer_test"

        async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
            inner = await ctx.run_strategy(DrainAll(), label="inner")
            assert inner.usage.num_samples == 4
            extra = await ctx.sample(ctx.request(prompt="after"))
            return ctx.finish(extra.text)

    backend = ScriptedBackend([Script(text=words(4))])
    result = await Orchestrator(backend).run(Outer(), PROBLEM)
    assert result.usage.num_samples == 5
    assert result.traces[0].label == "inner/sample"
    assert result.usage.sequential_tokens == 8


def test_critical_path_follows_time_order_and_parents() -> None:
    from paragen._accounting import critical_path_tokens
    from paragen.types import Trace

    traces = [
        Trace(id=0, start=0.0, end=1.0, completion_tokens=10),
        Trace(id=1, start=0.0, end=2.0, completion_tokens=30),
        Trace(id=2, start=1.5, end=3.0, completion_tokens=5),  # after 0 only: 15
        Trace(id=3, start=2.5, end=4.0, completion_tokens=7),  # after 1 (30) -> 37, beats 0 -> 2 chains
        Trace(id=4, start=0.5, end=4.0, completion_tokens=1, parents=[1]),  # named parent though overlapping
    ]
    assert critical_path_tokens(traces) == 37
    assert critical_path_tokens(traces[:3]) == 30
    assert critical_path_tokens([traces[1], traces[4]]) == 31
    assert critical_path_tokens([]) == 0


async def test_shared_request_does_not_wait_on_a_stream_that_never_ends() -> None:
    """After its last choice is aborted, a group is left even if the backend's stream would block forever."""
    from contextlib import asynccontextmanager

    import anyio

    from paragen.types import Delta, Usage

    class Stuck:
        def __init__(self) -> None:
            self.usage = Usage()

        async def abort(self, index: int) -> None:
            return None

        def __aiter__(self) -> Stuck:
            self._sent = False
            return self

        async def __anext__(self) -> Delta:
            if not self._sent:
                self._sent = True
                return Delta(index=0, text="\\boxed{1}", num_tokens=1, finish_reason="stop")
            await anyio.sleep_forever()
            raise AssertionError

    backend = ScriptedBackend(capabilities=Capabilities(native_n=True, per_choice_abort=True))

    @asynccontextmanager
    async def stream(_request: object):  # type: ignore[no-untyped-def]
        yield Stuck()

    backend.stream = stream  # type: ignore[method-assign, assignment]
    with anyio.fail_after(2):
        result = await Orchestrator(backend).run(FirstFinish(), PROBLEM)
    assert [t.status for t in result.traces] == ["ok", "cancelled", "cancelled", "cancelled"]


async def test_orchestrator_events_follow_each_sample_and_end_with_the_result() -> None:
    from pydantic import TypeAdapter

    from paragen.events import Event, Note, RunEnded, SampleEnded, SampleStarted

    class Noting(BaseStrategy[StrategyConfig]):
        name = "noting_test"

        async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
            async with ctx.fanout(ctx.request(prompt=problem.question), n=2) as fan:
                done = [t async for t in fan]
            ctx.emit("both done", tokens=[t.completion_tokens for t in done])
            return ctx.finish("x")

    events: list[object] = []
    scripts = [Script(text=words(3), token_delay=0.001), Script(text=words(5), token_delay=0.001)]
    backend = ScriptedBackend(scripts, order="fanout")
    result = await Orchestrator(backend, on_event=events.append).run(Noting(), PROBLEM)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SampleStarted", "SampleStarted", "SampleEnded", "SampleEnded", "Note", "RunEnded"]
    started = [e for e in events if isinstance(e, SampleStarted)]
    ended = [e for e in events if isinstance(e, SampleEnded)]
    assert [e.trace_id for e in started] == [0, 1] and [e.trace.id for e in ended] == [0, 1]
    assert all(e.problem_id == PROBLEM.id for e in started) and all(e.problem_id == PROBLEM.id for e in ended)
    assert [e.trace.completion_tokens for e in ended] == [3, 5]  # a finished trace, not a snapshot
    note = events[4]
    assert isinstance(note, Note) and note.data == {"tokens": [3, 5]} and note.message == "both done"
    last = events[-1]
    assert isinstance(last, RunEnded) and last.result == result
    adapter = TypeAdapter(Event)  # a JSONL log of events reads back as the same events
    assert [adapter.validate_json(adapter.dump_json(e)) for e in events] == events  # type: ignore[arg-type]


async def test_run_ended_is_sent_for_a_run_cut_by_its_deadline() -> None:
    from paragen.events import RunEnded

    events: list[object] = []
    backend = ScriptedBackend([Script(text=words(50), first_delay=5.0)])
    orchestrator = Orchestrator(backend, budget=Budget(deadline_s=0.05), on_event=events.append)
    result = await orchestrator.run(DrainAll(), PROBLEM)
    assert result.stop_reason == "deadline"
    assert isinstance(events[-1], RunEnded) and events[-1].result.stop_reason == "deadline"


async def test_concurrently_runs_children_beside_the_block_and_cancels_them() -> None:
    import anyio

    ctx = RunContext(ScriptedBackend([Script(text="a")]), PROBLEM)
    order: list[str] = []

    async def child(name: str, event: anyio.Event) -> None:
        await event.wait()
        order.append(name)

    go = anyio.Event()
    async with ctx.concurrently() as children:
        children.start(child, "child", go)
        order.append("block")
        go.set()
    assert order == ["block", "child"]  # the child ran beside the block; leaving waited for it

    stuck = ctx.concurrently()
    stuck.cancel("plan abandoned")  # before entering: the block starts cancelled
    async with stuck as children:
        children.start(anyio.sleep_forever)
        await anyio.sleep_forever()
    assert stuck.cancelled and stuck.cancel_reason == "plan abandoned"

    with pytest.raises(RuntimeError, match="inside"):
        ctx.concurrently().start(anyio.sleep, 0)


async def test_run_strategies_runs_sub_strategies_at_once_in_input_order() -> None:
    class Outer(BaseStrategy[StrategyConfig]):
        name = "outer_many_test"

        async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
            subs = [Problem(id=f"s{i}", question=f"q{i}") for i in range(3)]
            results = await ctx.run_strategies(DrainAll(), subs, label="sub")
            return ctx.finish(",".join(r.problem_id for r in results))

    backend = ScriptedBackend([Script(text=words(4), token_delay=0.001)])
    result = await Orchestrator(backend).run(Outer(), PROBLEM)
    assert result.answer == "s0,s1,s2"
    assert {t.label for t in result.traces} == {"sub0/sample", "sub1/sample", "sub2/sample"}
    # the three sub-runs overlapped: every sample started before any of them ended
    assert max(t.start for t in result.traces) < min(t.end or 0 for t in result.traces)
    assert result.usage.sequential_tokens == 4 and result.usage.num_samples == 12


class OneSample(BaseStrategy[StrategyConfig]):
    name = "one_sample_test"

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        trace = await ctx.sample(ctx.request(prompt=problem.question))
        return ctx.finish("x", text=trace.text)


async def test_one_sample_runs_in_the_callers_task_and_stops_like_a_fanout() -> None:
    """ctx.sample drives its one sample in the caller's own task (Fanout.one): cancelling the caller
    closes the backend stream and leaves the trace cancelled; a spent budget ends it as in a fan-out."""
    backend = ScriptedBackend([Script(text=words(50), token_delay=0.01)])
    ledger = Ledger(Budget(), None)
    ctx = RunContext(backend, PROBLEM, ledger=ledger)
    with anyio.move_on_after(0.05):
        await ctx.sample(ctx.request(prompt="long"))
    (trace,) = ledger.traces
    assert trace.status == "cancelled" and 0 < trace.completion_tokens < 50
    assert backend.streams[0].closed is not None and not ledger.live

    result = await Orchestrator(backend, budget=Budget(max_total_tokens=5)).run(OneSample(), PROBLEM)
    assert result.stop_reason == "budget" and result.traces[0].status == "cancelled"
    assert 5 <= result.traces[0].completion_tokens <= 6
    two = Fanout(Account(backend, ledger, "p", ""), [ctx.request(prompt="x", n=2)], label="s", kind="s")
    with pytest.raises(ValueError, match="exactly one sample"):
        await two.one()


async def test_requests_of_one_problem_share_an_affinity_other_problems_do_not() -> None:
    seen: list[str | None] = []

    def script(request: GenerateRequest, _index: int) -> Script:
        seen.append(request.affinity)
        return Script(text=words(2))

    backend = ScriptedBackend(script)
    problems = [Problem(question="1 + 1?"), Problem(question="2 + 2?")]  # both with the default id
    await Orchestrator(backend).run_many(TwoRounds(), problems)
    per_key = Counter(seen)  # the two problems run at once: their requests interleave
    assert len(per_key) == 2 and list(per_key.values()) == [len(seen) // 2] * 2, per_key
