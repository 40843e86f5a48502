"""Grading: math-verify in a process pool, with timeouts of our own.

math-verify's own timeouts use ``signal.alarm``, which fails or silently mis-grades off
the main thread (its issues #11, #50, #55). So grading never runs in worker threads or
in the event loop: each comparison runs in the main thread of a pool process (spawn or
forkserver, never fork from a threaded parent), under an interval timer set there, and
the parent also gives every batch a wall-clock limit, killing the pool if it is passed.
Async code calls :meth:`Grader.grade_many` through ``anyio.to_thread.run_sync``; the
thread only waits on futures, the comparison itself happens in another process.

Outcomes: ``correct``, ``incorrect``, ``no_answer`` (no final answer was found),
``truncated`` (no answer and the deciding sample hit its token limit), ``error`` (the
backend failed; the cause is kept), ``grader_timeout`` and ``grader_error``; the harness
adds ``failed`` (the run raised, so there was nothing to grade) without calling the grader.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

from paragen.types import StrategyResult

Outcome = Literal[
    "correct", "incorrect", "no_answer", "truncated", "error", "failed", "grader_timeout", "grader_error"
]
Verdict = Literal["correct", "incorrect", "grader_timeout", "grader_error"]


@dataclass(frozen=True, slots=True)
class Grade:
    """The grader's verdict on one result, with the extracted answer and, on failure, its cause."""

    outcome: Outcome
    answer: str | None
    gold: str | None
    cause: str | None = None
    score: float | None = None  # a proof: the judges' mean score (evals.run.judging)
    judges: list[Any] | None = None  # a proof: each judge's JudgeScore

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"

    def as_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"outcome": self.outcome, "correct": self.correct, "answer": self.answer,
                                  "gold": self.gold, "cause": self.cause}  # fmt: skip
        if self.judges is not None:
            fields.update(score=self.score, judges=[j.model_dump() for j in self.judges])
        return fields


class _Timeout(Exception):
    pass


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


Equivalence = Callable[[str, str], bool]


def _compare(prediction: str, gold: str, timeout_s: float, same: Equivalence | None) -> Verdict:
    """Runs in the pool process's main thread, where an interval timer can interrupt math-verify."""
    from paragen.answers import equivalent

    _warm()
    signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return "correct" if (same or equivalent)(prediction, gold) else "incorrect"
    except _Timeout:
        return "grader_timeout"
    except Exception:
        return "grader_error"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _watch_parent(grading: int) -> None:
    """Pool initializer: exit when the grading process dies (a SIGKILLed run must not leave orphans).

    The worker's parent is watched by ``os.getppid()``: it changes the moment the parent dies and
    the worker is re-parented (a test of the parent's pid would see a dead parent not yet reaped,
    a zombie, as alive). Under forkserver that parent is the forkserver, which does not end with
    the grading process: every process it forks holds its liveness pipe, so its own workers keep it
    up. So the worker also tests the grading process's pid (``grading``), which is not its parent
    there: it ends when that pid is gone, however the grading process died (SIGKILL included).
    """
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent and _alive(grading):
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user: not ours to judge
        return True
    return True


def _warm() -> bool:
    import logging

    import math_verify  # noqa: F401  # imported once per worker, before the first timed comparison

    # math-verify warns on every call that its own timeouts are off; ours are on (the timer above).
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return True


class Grader:
    """A pool of grading processes; use as a context manager or call :meth:`close`.

    ``equivalence`` replaces math-verify (a picklable top-level function; tests use it to
    simulate a hang); ``backstop_s`` is the slack of the outer wall-clock limit.
    """

    def __init__(
        self,
        workers: int = 2,
        timeout_s: float = 5.0,
        context: str | None = None,
        *,
        equivalence: Equivalence | None = None,
        backstop_s: float = 10.0,
    ) -> None:
        self.workers = max(1, workers)
        self.timeout_s = timeout_s
        self.equivalence = equivalence
        self.backstop_s = backstop_s
        default = "forkserver" if sys.platform.startswith("linux") else "spawn"
        self._context = multiprocessing.get_context(context or default)
        self._pool: ProcessPoolExecutor | None = None
        self._warming: list[Future[bool]] = []

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def start(self) -> None:
        """Start the pool's processes now, without waiting for them: the first comparison waits."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=self._context, initializer=_watch_parent, initargs=(os.getpid(),)
            )
            self._warming = [self._pool.submit(_warm) for _ in range(self.workers)]

    def wait_started(self) -> None:
        """Start the pool if need be and wait until its processes are ready (blocking)."""
        self._ensure_pool()

    def _ensure_pool(self) -> ProcessPoolExecutor:
        self.start()
        assert self._pool is not None
        if self._warming:
            wait(self._warming, timeout=120)
            self._warming = []
        return self._pool

    def _kill_pool(self) -> None:
        # A comparison stuck in C code ignores the timer; killing its process is the only sure stop.
        if self._pool is None:
            return
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def compare_many(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """Verdicts for (prediction, gold) pairs, in order. Blocking: call it from a thread in async code."""
        if not pairs:
            return []
        pool = self._ensure_pool()
        futures: list[Future[Verdict]] = [
            pool.submit(_compare, p, g, self.timeout_s, self.equivalence) for p, g in pairs
        ]
        # Every comparison has its own timer; this outer limit only catches a wedged worker.
        limit = (self.timeout_s + 1.0) * (len(pairs) / self.workers + 1) + self.backstop_s
        done, _ = wait(futures, timeout=limit)
        verdicts = [_verdict(f) if f in done else "grader_timeout" for f in futures]
        if len(done) < len(futures):
            self._kill_pool()
        return verdicts

    def grade_many(self, items: Sequence[tuple[StrategyResult, str | None]]) -> list[Grade]:
        """Grades for (result, gold) pairs: outcomes decided here, equivalence in the pool."""
        grades: list[Grade | None] = [pre_grade(r, g) for r, g in items]
        todo = [i for i, g in enumerate(grades) if g is None]
        pairs = [(str(items[i][0].answer), str(items[i][1])) for i in todo]
        for i, verdict in zip(todo, self.compare_many(pairs), strict=True):
            result, gold = items[i]
            cause = "math-verify timed out" if verdict == "grader_timeout" else None
            grades[i] = Grade(verdict, result.answer, gold, cause)
        return [g for g in grades if g is not None]


def _verdict(future: Future[Verdict]) -> Verdict:
    try:
        return future.result(timeout=0)
    except Exception:  # a worker that died (e.g. killed) gives a broken-pool error
        return "grader_error"


def pre_grade(result: StrategyResult, gold: str | None) -> Grade | None:
    """The outcome when no comparison is needed (no answer, backend error), else None."""
    if result.answer is not None:
        return None if gold is not None else Grade("incorrect", result.answer, None, "no gold answer")
    samples = [t for t in result.traces if t.kind == "sample"]
    errors = [t.error or "error" for t in samples if t.status == "error"]
    if result.stop_reason == "error" or (samples and len(errors) == len(samples)):
        return Grade("error", None, gold, result.error or (errors[0] if errors else "backend error"))
    if any(t.finish_reason == "length" for t in samples if t.status == "ok"):
        return Grade("truncated", None, gold, "a sample hit max_tokens before giving an answer")
    cause = f"stopped: {result.stop_reason}" if result.stop_reason != "done" else "no final answer found"
    return Grade("no_answer", None, gold, cause)
