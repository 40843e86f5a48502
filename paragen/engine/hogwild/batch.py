"""Several Hogwild! sessions' rows in one forward pass, each session's samples its own.

The engine's step thread batches the sessions' waiting passes (``AsyncEngine.call_batched``) and
runs them here: concurrent Hogwild! runs cost one forward a step, not one each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from paragen.engine.hogwild.forward import model_logits, sample_rows
from paragen.engine.hogwild.session import EngineSharedSession, Prepared
from paragen.errors import EngineError
from paragen.types import SharedRow, SharedSample


@dataclass(frozen=True, slots=True)
class SharedForward:
    """One session's rows for a forward pass (``forward_together`` runs several sessions' at once)."""

    session: EngineSharedSession
    rows: Sequence[SharedRow]
    suppress_token_ids: tuple[int, ...] = ()
    greedy: bool = False


@torch.inference_mode()
def forward_together(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
    """One forward pass over the rows of several sessions of one engine; each job's samples or error.

    Sessions never see each other's tokens (a row attends only its own view), so merging them
    changes nothing but the batch: concurrent Hogwild! runs cost one pass per step, not one each.
    A job whose rows are malformed, or whose segments do not fit in the cache, fails alone. Two
    jobs of one session (tasks of one strategy forwarding at once) run in order, in two passes.
    """
    outcomes: dict[int, list[SharedSample] | EngineError] = {}
    pending = list(range(len(jobs)))
    while pending:
        now: dict[int, int] = {}  # session -> its first pending job
        for i in pending:
            now.setdefault(id(jobs[i].session), i)
        chosen = list(now.values())  # in job order, as pending is
        outcomes.update(zip(chosen, _forward_once([jobs[i] for i in chosen]), strict=True))
        pending = [i for i in pending if i not in outcomes]
    return [outcomes[i] for i in range(len(jobs))]


def _forward_once(jobs: Sequence[SharedForward]) -> list[list[SharedSample] | EngineError]:
    """``forward_together`` for jobs of distinct sessions: one model forward."""
    outcomes: dict[int, list[SharedSample] | EngineError] = {}
    ready: list[tuple[int, Prepared]] = []
    for i, job in enumerate(jobs):
        try:
            ready.append((i, job.session.prepare(job.rows)))
        except EngineError as exc:
            outcomes[i] = exc
    if not ready:
        return [outcomes[i] for i in range(len(jobs))]
    engine = jobs[ready[0][0]].session.engine
    try:
        placed = [jobs[i].session.place(row, prep.lengths) for i, prep in ready for row in prep.rows]
        logits = model_logits(engine, placed)
    except Exception:  # nothing was written for sure: no session keeps or offers a first segment of it
        for i, prepared in ready:
            jobs[i].session.abandon(prepared)
        raise
    start = 0
    for i, prepared in ready:
        job = jobs[i]
        job.session.commit(prepared)
        if job.suppress_token_ids:
            logits[start : start + len(job.rows), list(job.suppress_token_ids)] = float("-inf")
        start += len(job.rows)
    draws = [draw for i, _ in ready for draw in jobs[i].session.draws(jobs[i].rows, jobs[i].greedy)]
    samples = [SharedSample(t, lp) for t, lp in sample_rows(engine.runner, logits, draws)]
    start = 0
    for i, _ in ready:
        outcomes[i] = samples[start : start + len(jobs[i].rows)]
        start += len(jobs[i].rows)
    return [outcomes[i] for i in range(len(jobs))]
