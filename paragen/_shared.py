"""A shared session (Hogwild!: workers over one shared KV cache), seen through the run's accounting.

``RunContext.shared_session(n)`` opens the backend's :class:`SharedSession` and hands the
strategy a :class:`RunSharedSession`: the session's forward pass, plus what every sample of a run
gets elsewhere from the fan-out:

- one :class:`~paragen.types.Trace` per worker, with the worker's text (what it generated and
  the headers the strategy wrote into its turn) and its generated tokens;
- every generated token charged to the run's budget; once the budget is spent the session
  is cancelled like any sample ("budget");
- ``ctx.cancel(reason)`` and the run's deadline cancel the session: leaving its context frees
  every segment's blocks in the backend;
- a :class:`~paragen.events.WorkerText` event per worker and forward pass, so a live view or a
  server can show the workers writing side by side.

Token rules: a forward that continues a worker starts its row with the worker's previous sample;
any further input tokens are text the strategy injected (step headers), counted as that worker's
prompt tokens and shown in its text. Prefills (the shared prompt, layout headers) are prompt tokens
of the first worker's trace, processed once for all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from paragen._live import LiveSample
from paragen.backends.base import SharedRow, SharedSample, SharedSession, SharedSessionBackend
from paragen.errors import BackendError, BudgetExceededError, ConfigError
from paragen.events import WorkerText
from paragen.types import Delta, FinishReason, SamplingParams, Trace

if TYPE_CHECKING:
    from paragen._ledger import Account

_WINDOW = 6  # tokens of left context so a suffix decodes with the spacing the full decode has


class IncrementalText:
    """Token ids to text as they come, releasing a piece only once it decodes cleanly."""

    __slots__ = ("_decode", "_ids", "_prefix", "_read")

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def add(self, token_ids: Sequence[int]) -> str:
        """Feed tokens; returns the new text they complete (may be empty while a character is split)."""
        self._ids.extend(token_ids)
        window = self._ids[self._prefix :]
        before = self._decode(window[: self._read - self._prefix])
        now = self._decode(window)
        if now.endswith("\ufffd") or len(now) <= len(before):
            return ""
        self._read = len(self._ids)
        self._prefix = max(0, self._read - _WINDOW)
        return now[len(before) :]


class _Worker:
    __slots__ = ("has_sample", "last_sample", "live", "name", "text")

    def __init__(self, live: LiveSample, name: str, text: IncrementalText) -> None:
        self.live = live
        self.name = name
        self.text = text
        self.has_sample = False
        self.last_sample = -1


class RunSharedSession:
    """The run's side of a shared session: the backend's ``SharedSession`` with per-worker traces,
    budget charging, cancellation and events."""

    def __init__(
        self, account: Account, session: SharedSession, names: Sequence[str], scope: anyio.CancelScope
    ) -> None:
        self._account = account
        self._session = session
        self._scope = scope
        self._workers = [self._new_worker(i, name, scope) for i, name in enumerate(names)]
        self.num_forward_passes = 0  # passes that generated tokens (prefills not counted)

    # -- the session, passed through -------------------------------------------------------------

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._session.eos_token_ids

    def tokenize(self, text: str) -> list[int]:
        return self._session.tokenize(text)

    def has_room(self, rows: Sequence[SharedRow], reserve: int) -> bool:
        """Whether every row's view, with its input, stays ``reserve`` tokens inside the model's positions."""
        limit = self._session.max_view_tokens - reserve
        # a session's rows share most segments: each length asked once (this runs every pass)
        lengths = {s: self._session.segment_length(s) for s in {s for row in rows for s in row.view}}
        return all(sum(lengths[s] for s in row.view) + len(row.token_ids) <= limit for row in rows)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self._session.detokenize(token_ids)

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str:
        return self._session.apply_chat_template(messages)

    def segment_length(self, segment: int) -> int:
        return self._session.segment_length(segment)

    async def new_segment(self) -> int:
        return await self._session.new_segment()

    async def new_segments(self, count: int) -> list[int]:
        """``count`` new segments in one round trip (a session's start asks for all of its own)."""
        return await self._session.new_segments(count)

    async def free_segment(self, segment: int) -> None:
        await self._session.free_segment(segment)

    async def append_from(self, dst: int, src: int, *, clear: bool = False) -> None:
        """Fold ``src``'s tokens onto the end of ``dst`` (the cache copies them; nothing is generated);
        with ``clear``, ``src`` is emptied in the same call, ready for the worker's next step."""
        await self._session.append_from(dst, src, clear=clear)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def traces(self) -> list[Trace]:
        return [w.live.snapshot() for w in self._workers]

    def text(self, worker: int) -> str:
        """The worker's text so far (generated tokens and injected headers)."""
        return self._workers[worker].live.text()

    @property
    def stop_reason(self) -> str | None:
        """Why the session was cut short (``"budget"``, a cancel reason), or None."""
        return next((w.live.stop_reason for w in self._workers if w.live.stop_reason), None)

    # -- forward passes --------------------------------------------------------------------------

    async def prefill(
        self, rows: Sequence[SharedRow], *, first_token_for: int | None = None
    ) -> list[SharedSample]:
        """Write prompt text into segments (one forward); its samples are dropped.

        With ``first_token_for=w`` the sample of worker w's row is that worker's first generated
        token (plain decoding: the prompt's last position predicts the first token).
        """
        samples = await self._session.forward(rows)
        first = self._workers[0].live.trace
        first.prompt_tokens += sum(len(r.token_ids) for r in rows)
        if self._session.num_reused_tokens:  # its prompt began like another live session's
            first.cached_prompt_tokens = self._session.num_reused_tokens
        if first_token_for is not None:
            row = next(i for i, r in enumerate(rows) if r.worker == first_token_for)
            self.num_forward_passes += 1
            await self._record(first_token_for, (), samples[row])
        return samples

    async def step(
        self, rows: Sequence[SharedRow], *, suppress_token_ids: Sequence[int] = ()
    ) -> list[SharedSample]:
        """One forward pass: every row's worker gets its next token, charged and shown."""
        for row in rows:
            worker = self._workers[row.worker]
            if worker.has_sample and row.token_ids[0] != worker.last_sample:
                raise AssertionError(f"worker {row.worker}'s row must start with its previous sample")
        samples = await self._session.forward(rows, suppress_token_ids=suppress_token_ids)
        self.num_forward_passes += 1
        for row, sample in zip(rows, samples, strict=True):
            worker = self._workers[row.worker]
            injected = row.token_ids[1:] if worker.has_sample else row.token_ids
            worker.live.trace.prompt_tokens += len(injected)
            await self._record(row.worker, injected, sample)
        return samples

    async def continue_greedy(
        self,
        label: str,
        *,
        worker: int,
        view: Sequence[int],
        token_ids: Sequence[int],
        max_tokens: int,
        done: Callable[[str], bool],
    ) -> Trace:
        """A short greedy continuation (the finisher) as a trace of its own, after the workers ended.

        ``token_ids`` are written to ``view[-1]`` first; decoding stops after ``max_tokens`` or once
        ``done(text so far)``. Its tokens are charged like any other.
        """
        account = self._account
        parents = [w.live.trace.id for w in self._workers]
        live = LiveSample(account.new_trace(label, "sample", parents))
        live.trace.count_source = "token_ids"
        text = IncrementalText(self._session.detokenize)
        inputs, finish = list(token_ids), "length"
        live.trace.prompt_tokens = len(inputs)
        try:
            for _ in range(max_tokens):
                (sample,) = await self._session.forward([SharedRow(worker, view, inputs)], greedy=True)
                piece = "" if sample.token_id in self.eos_token_ids else text.add([sample.token_id])
                live.add(Delta(0, piece, 1, (sample.token_id,)), account.now())
                account.ledger.charge(1)
                inputs = [sample.token_id]
                if sample.token_id in self.eos_token_ids or done(live.text()):
                    finish = "stop"
                    break
        finally:
            live.add(Delta(0, "", 0, finish_reason=_finish(finish)), account.now())
            account.ended(live.finish(account.now()))
        return live.trace

    def end(self, finish_reason: FinishReason, *, answers: Sequence[str | None] = ()) -> None:
        """Close every worker's trace (ok, with ``finish_reason``) and record each one's answer."""
        for index, worker in enumerate(self._workers):
            if index < len(answers):
                worker.live.trace.answer = answers[index]
            worker.live.add(Delta(0, "", 0, finish_reason=finish_reason), self._account.now())
            self._close(worker, None)

    # -- internals -------------------------------------------------------------------------------

    def _new_worker(self, index: int, name: str, scope: anyio.CancelScope) -> _Worker:
        account = self._account
        trace = account.new_trace(name, "sample", [])
        trace.meta.update({"worker": index, "name": name})
        trace.count_source = "token_ids"
        live = LiveSample(trace)
        live.scope = scope  # ctx.cancel(...) cancels the session: one scope for all workers
        account.ledger.live[trace.id] = live
        return _Worker(live, name, IncrementalText(self._session.detokenize))

    async def _record(self, index: int, injected: Sequence[int], sample: SharedSample) -> None:
        account, worker = self._account, self._workers[index]
        token = sample.token_id
        shown = worker.text.add(injected) if injected else ""
        if token not in self.eos_token_ids:
            shown += worker.text.add([token])
        now = account.now()
        logprobs = None if sample.logprob is None else (sample.logprob,)
        worker.live.add(Delta(0, shown, 1, (token,), logprobs), now)
        worker.has_sample, worker.last_sample = True, token
        if shown:
            emit_worker_text(account, worker.live.trace.id, index, worker.name, shown)
        if account.ledger.charge(1):
            await account.ledger.cancel_all("budget")

    def _close(self, worker: _Worker, error: str | None) -> None:
        if worker.live.is_running:
            self._account.ended(worker.live.finish(self._account.now(), error=error))

    def close_all(self, error: str | None = None) -> None:
        """End traces still open (the session was cancelled or failed)."""
        for worker in self._workers:
            self._close(worker, error)


def emit_worker_text(account: Account, trace_id: int, worker: int, name: str, text: str) -> None:
    """Send a :class:`WorkerText` event (new text of one worker) to the run's listeners."""
    if account.ledger.sink is not None:
        account.ledger.send(
            WorkerText(
                problem_id=account.problem_id,
                trace_id=trace_id,
                worker=worker,
                name=name,
                text=text,
                t=account.now(),
            )
        )


def _finish(reason: str) -> FinishReason:
    return "stop" if reason == "stop" else "length"


@asynccontextmanager
async def open_shared_session(
    account: Account, defaults: SamplingParams, num_workers: int, names: Sequence[str], params: dict[str, Any]
) -> AsyncIterator[RunSharedSession]:
    """See :meth:`RunContext.shared_session`."""
    backend = account.backend
    if not backend.capabilities.shared_cache or not isinstance(backend, SharedSessionBackend):
        raise ConfigError(
            f"backend {backend.name!r} has no shared KV cache",
            hint="use the engine backend, or the hogwild_text strategy (an approximation) elsewhere",
        )
    if num_workers < 1:
        raise ValueError(f"num_workers must be positive, got {num_workers}")
    if account.ledger.budget_hit:
        raise BudgetExceededError("the run's token budget is used up", kind="total_tokens")
    labels = list(names) or [f"worker{i}" for i in range(num_workers)]
    if len(labels) != num_workers:
        raise ValueError(f"{len(labels)} names for {num_workers} workers")
    sampling = SamplingParams.model_validate({**defaults.model_dump(), **params})
    scope = anyio.CancelScope()
    run_session: RunSharedSession | None = None
    try:
        with scope:
            async with backend.shared_session(sampling, num_workers=num_workers) as session:
                run_session = RunSharedSession(account, session, labels, scope)
                yield run_session
    except BackendError as exc:
        if run_session is not None:
            run_session.close_all(exc.one_line())
        raise
    finally:
        if run_session is not None:
            run_session.close_all()


__all__ = ["IncrementalText", "RunSharedSession", "emit_worker_text", "open_shared_session"]
