"""What a run's exception means for its result: the one place a run's failures are classified.

A strategy's code runs inside task groups (a fan-out, ``ctx.concurrently()``, sub-strategies
side by side), and anyio wraps whatever leaves a task group in an exception group, nested
as deep as the groups are. :func:`classify` looks at the leaves, at any depth:

- a leaf that is not a spent budget, a backend failure or a cancellation is a bug (a
  strategy's own error, a foreign error a backend failed to map): it is raised as itself,
  unwrapped, with its own traceback. It wins over everything else in the group: a bug
  beside a spent budget is still a bug, and must be seen. Further bugs of the same group
  are named in a note on the first.
- a cancellation leaf reaches it only when the run's own deadline fired: ``"deadline"``.
- a :class:`~paragen.errors.BudgetExceededError`: ``"budget"``.
- a :class:`~paragen.errors.BackendError`: ``"error"``.

In that order: a deadline that passed ends the run as "deadline" whatever else was in
flight, a spent budget outranks the backend errors it may have caused. Cancellation from
outside never reaches this module: the orchestrator lets it propagate untouched.
"""

from __future__ import annotations

from typing import Literal

import anyio

from paragen.errors import BackendError, BudgetExceededError

StopReason = Literal["done", "deadline", "budget", "error"]
KNOWN = (BudgetExceededError, BackendError)
"""What a run's result can record; anything else a strategy raises is a bug."""


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``, exception groups flattened at any depth, in order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def is_cancellation(exc: BaseException) -> bool:
    try:
        return isinstance(exc, anyio.get_cancelled_exc_class())
    except anyio.NoEventLoopError:  # classify() called outside a run (a unit test): nothing was cancelled
        return False


def classify(exc: BaseException) -> tuple[StopReason, str | None]:
    """(stop reason, error line) of a run that ``exc`` ended; raises a bug in it as itself."""
    found = leaves(exc)
    bugs = [e for e in found if not (isinstance(e, KNOWN) or is_cancellation(e))]
    if bugs:
        raise _with_note(bugs[0], bugs[1:])
    if any(is_cancellation(e) for e in found):
        return "deadline", None
    budget = [e for e in found if isinstance(e, BudgetExceededError)]
    if budget:
        return "budget", budget[0].one_line()
    backend = [e for e in found if isinstance(e, BackendError)]
    return "error", backend[0].one_line()


def _with_note(bug: BaseException, others: list[BaseException]) -> BaseException:
    if others:
        names = ", ".join(f"{type(e).__name__}: {e}" for e in others[:3])
        more = f" (and {len(others) - 3} more)" if len(others) > 3 else ""
        bug.add_note(f"the same task group also raised {names}{more}")
    return bug


__all__ = ["StopReason", "classify", "leaves"]
