"""``engine:PATH``: a PRM or an ORM scored by paragen's own engine, concurrent calls batched.

    scorer = EngineScorer("path/to/Qwen2.5-Math-PRM-7B")    # or build_scorer("engine:PATH?dtype=bf16")
    await scorer.open()
    scores = await scorer.score(ScoreRequest(question=q, steps=steps))

A beam search scores its candidates together, so ``score()`` does not run a forward of its own:
it queues its request and waits for the forward lock. Whoever takes the lock runs its request and
every other queued one (up to ``max_batch_tokens``) as one packed prefill in a worker thread
(``reward_model.py``) and leaves each its result; the callers behind it find theirs done.
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import torch

from paragen.engine.host import pick_dtype
from paragen.errors import ConfigError
from paragen.scoring.base import DEFAULT_STEP_TAG, ScoreRequest, ScorerError, ScorerKind, StepScores
from paragen.scoring.reward_model import Encoded, RewardModel

DEFAULT_MAX_BATCH_TOKENS = 16384


@dataclass(slots=True, eq=False)  # identity, not value: two equal requests are two queue entries
class _Pending:
    """A queued request; the forward that runs it fills in ``scores`` or ``error``."""

    encoded: Encoded
    scores: tuple[float, ...] | None = None
    error: Exception | None = None

    @property
    def is_settled(self) -> bool:
        return self.scores is not None or self.error is not None


class EngineScorer:
    """A reward model (``*ForProcessRewardModel``, ``*ForSequenceClassification``, ...) on the engine.

    Options come from a scorer spec as strings: ``step_tag``, ``dtype`` (auto: fp32 on a CPU,
    bf16 on a GPU), ``device`` (cpu, cuda, ...), ``max_batch_tokens``.
    """

    def __init__(
        self,
        target: str,
        *,
        step_tag: str = DEFAULT_STEP_TAG,
        dtype: str = "auto",
        device: str = "cpu",
        max_batch_tokens: str | int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> None:
        self.name = f"engine:{target}"
        if device.startswith("cuda") and not torch.cuda.is_available():  # else a worker thread's traceback
            raise ConfigError(f"scorer {self.name}: device {device!r} but torch sees no CUDA GPU")
        self.target, self.step_tag, self.device = target, step_tag, device
        # fp32 on a CPU unless asked: the scores stay exact, and a scorer's prefill is compute-bound.
        is_cpu = not device.startswith("cuda")
        self.dtype: torch.dtype = pick_dtype("float32" if dtype == "auto" and is_cpu else dtype, device)
        self.max_batch_tokens = _positive_int(max_batch_tokens, "max_batch_tokens")
        self.num_forwards = 0  # batches run so far (how well concurrent calls were batched)
        self._model: RewardModel | None = None
        self._open_lock = anyio.Lock()
        self._forward_lock = anyio.Lock()
        self._queue: list[_Pending] = []

    @property
    def kind(self) -> ScorerKind:
        """prm or orm, from the checkpoint's architecture (known once opened)."""
        return self._loaded().kind

    @property
    def num_queued(self) -> int:
        """Requests waiting for a forward."""
        return len(self._queue)

    async def open(self) -> None:
        """Load the weights in a worker thread (once; a checkpoint without a score head fails here)."""
        async with self._open_lock:
            if self._model is None:
                self._model = await anyio.to_thread.run_sync(
                    RewardModel, self.target, self.step_tag, self.dtype, self.device
                )

    async def aclose(self) -> None:
        """Drop the weights (a later score() loads them again); a running forward keeps its own
        reference, so they go when it returns."""
        self._model = None

    async def score(self, request: ScoreRequest) -> StepScores:
        if self._model is None:
            await self.open()
        model = self._loaded()
        item = _Pending(model.encode(request))
        self._queue.append(item)
        try:
            # Cancelled while waiting here, a call returns at once and its request leaves the queue.
            # The caller running a forward waits for it (the thread cannot be stopped), which is
            # bounded: one prefill of at most max_batch_tokens tokens. Should it be cancelled before
            # the thread starts, the requests it took stay unsettled and each runs when its own
            # caller holds the lock: nothing is lost, only that batch is split.
            async with self._forward_lock:
                if not item.is_settled:
                    await anyio.to_thread.run_sync(self._run, model, self._take_batch(item))
        finally:
            if item in self._queue:
                self._queue.remove(item)
        if item.error is not None:  # the batch's forward failed; each caller raises its own error
            detail = f"{type(item.error).__name__}: {item.error}"
            raise ScorerError(f"{self.name}: the reward model's forward failed: {detail}") from item.error
        assert item.scores is not None
        return StepScores(steps=item.scores, prompt_tokens=len(item.encoded.ids), count_source="tokenizer")

    def _take_batch(self, first: _Pending) -> list[_Pending]:
        """``first`` and the queued requests that fit beside it in ``max_batch_tokens``, dequeued."""
        batch, tokens = [first], len(first.encoded.ids)
        for other in self._queue:
            size = len(other.encoded.ids)
            if other is not first and tokens + size <= self.max_batch_tokens:
                batch.append(other)
                tokens += size
        self._queue = [item for item in self._queue if item not in batch]
        return batch

    def _run(self, model: RewardModel, batch: list[_Pending]) -> None:
        """One forward, in the worker thread; each request gets its scores here, so a caller that
        stopped waiting (cancelled) takes nothing from the others."""
        self.num_forwards += 1
        try:
            results = model.score([item.encoded for item in batch])
        except Exception as exc:  # one forward for all: every request in it failed
            for item in batch:
                item.error = exc
            return
        for item, scores in zip(batch, results, strict=True):
            item.scores = scores

    def _loaded(self) -> RewardModel:
        if self._model is None:
            raise ScorerError(f"{self.name} is not open (await open() first)")
        return self._model


def _positive_int(value: str | int, option: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ConfigError(f"scorer option {option}={value!r} is not a positive whole number")
    return number
