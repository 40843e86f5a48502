"""A reward model on vLLM's AsyncLLM in this process, with the pooling runner.

    scorer = VLLMScorer("Qwen/Qwen2.5-Math-PRM-7B", dtype="bfloat16")   # vllm:PATH?dtype=...
    await scorer.open()      # loads the model (in a worker thread: the event loop goes on)

The engine is built with ``runner="pooling"`` and, for a PRM, the step tag's token id as the
STEP pooler's ``step_tag_id`` (read from the model's tokenizer: vLLM's default is Qwen's
151651, wrong for any other vocabulary). The chat is rendered here with the model's chat
template and sent as token ids, so prompt tokens are exact (``count_source="token_ids"``).
Options are those of the vllm backend (:class:`paragen.backends.vllm.VLLMConfig`); vllm is
imported only by ``open()``. Leaving ``score()`` by cancellation aborts the engine's request.
"""

from __future__ import annotations

import importlib
import uuid
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from paragen.backends.vllm import VLLMConfig, cpu_safe, import_vllm
from paragen.errors import build_config
from paragen.scoring.base import DEFAULT_STEP_TAG, ScoreRequest, ScorerError, StepScores
from paragen.scoring.pooled import PooledRewardModel


class VLLMScorer(PooledRewardModel):
    """A PRM (default) or ORM loaded by vLLM from ``model_path``; other options go to the engine."""

    def __init__(
        self, model_path: str, *, step_tag: str = DEFAULT_STEP_TAG, kind: str = "prm", **options: Any
    ) -> None:
        super().__init__(kind, step_tag)
        self.name = f"vllm:{model_path}"
        self.config = build_config(
            VLLMConfig,
            {**options, "model": model_path},
            what="vllm scorer options",
            hint="other engine args go in engine_args",
        )
        self.engine: Any = None
        self._tokenizer: Any = None
        self._tag_id: int | None = None
        self._task = "token_classify"
        self._opening = anyio.Lock()

    async def open(self) -> None:
        """Load the tokenizer and the engine (once), in a worker thread: loading takes seconds to
        minutes, and a server's other requests go on meanwhile. vLLM starts the engine's output
        task on the event loop at the first request."""
        async with self._opening:  # concurrent first calls load one engine
            if self.engine is not None:
                return
            # Shielded: the thread cannot be stopped, and an engine it built must not be dropped
            # unclosed; a cancellation lands at the next checkpoint, where the engine is shut down.
            with anyio.CancelScope(shield=True):
                engine = await anyio.to_thread.run_sync(self._load)
            try:
                await anyio.lowlevel.checkpoint()
                if self._kind == "orm":
                    self._task = await _orm_task(engine)
            except BaseException:
                _shutdown(engine)
                raise
            self.engine = engine  # last: score() takes a set engine as ready

    def _load(self) -> Any:
        vllm = import_vllm()
        self._tokenizer = _load_tokenizer(self.config.tokenizer or self.config.model)
        kwargs = {**self.config.to_engine_kwargs(), "runner": "pooling"}
        if self._kind == "prm":
            self._tag_id = _single_token(self._tokenizer, self.step_tag)
            from vllm.config import PoolerConfig

            kwargs["pooler_config"] = PoolerConfig(step_tag_id=self._tag_id)
        from vllm.v1.engine.async_llm import AsyncLLM

        try:
            return AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(**cpu_safe(kwargs)))
        except Exception as exc:  # a wrong path, an architecture vLLM cannot pool, ...
            raise ScorerError(f"vLLM could not load {self.config.model} as a reward model: {exc}") from exc

    async def score(self, request: ScoreRequest) -> StepScores:
        if self.engine is None:
            await self.open()
        ids = self._prompt_ids(request)
        data = await self._encode(ids)
        steps = self._steps(data, len(request.steps), self._tag_id)
        return StepScores(steps=steps, prompt_tokens=len(ids), count_source="token_ids")

    async def aclose(self) -> None:
        """Stop the engine (its core process included) while the event loop still runs."""
        engine, self.engine = self.engine, None
        if engine is not None:
            _shutdown(engine)

    def _prompt_ids(self, request: ScoreRequest) -> list[int]:
        messages = self._messages(request)
        text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        return list(self._tokenizer(text, add_special_tokens=False).input_ids)

    async def _encode(self, ids: list[int]) -> object:
        """The pooler's output for one prompt, as lists; a cancelled call aborts it in the engine."""
        from vllm import PoolingParams

        params = PoolingParams(task=self._task, use_activation=False if self._kind == "orm" else None)
        request_id = f"score-{uuid.uuid4().hex}"
        outputs = self.engine.encode({"prompt_token_ids": ids}, params, request_id)
        finished = False
        try:
            async for output in outputs:
                finished = bool(output.finished)
                if finished:
                    return output.outputs.data.tolist()
        except Exception as exc:  # e.g. a prompt longer than max_model_len, a dead engine
            raise ScorerError(f"vLLM failed to score: {type(exc).__name__}: {exc}") from exc
        finally:
            with anyio.CancelScope(shield=True):
                await outputs.aclose()
                if not finished and self.engine is not None:
                    await self.engine.abort(request_id)
        raise ScorerError("vLLM ended the scoring request without an output")


async def _orm_task(engine: Any) -> str:
    """``classify`` for a sequence classifier; ``token_classify`` for a per-token reward model."""
    tasks = await engine.get_supported_tasks()
    return "classify" if "classify" in tasks else "token_classify"


def _shutdown(engine: Any) -> None:
    """Stop the engine (its core process included) while the event loop still runs."""
    engine.shutdown()
    # As the vllm backend does: AsyncLLM.__del__ would shut down again at interpreter exit,
    # after the loop is gone, and print a traceback; with these gone it has nothing to do.
    for part in ("output_handler", "engine_core", "renderer"):
        if getattr(engine, part, None) is not None:
            setattr(engine, part, None)


def _load_tokenizer(path: str) -> Any:
    transformers: Any = importlib.import_module("transformers")
    try:
        return transformers.AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ScorerError(f"no tokenizer at {path}: {exc}") from exc


def _single_token(tokenizer: Any, step_tag: str) -> int:
    ids = tokenizer.encode(step_tag, add_special_tokens=False)
    if len(ids) != 1:
        raise ScorerError(f"the step tag {step_tag!r} is {len(ids)} tokens in this tokenizer, not one")
    return int(ids[0])
