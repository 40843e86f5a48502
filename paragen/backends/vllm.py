"""In-process vLLM backend: vLLM's AsyncLLM (or the older AsyncLLMEngine) behind the Backend protocol.

    backend = VLLMBackend.from_spec("Qwen/Qwen3-0.6B", gpu_memory_utilization=0.8)

An engine built with a reasoning parser or a reasoning config (``reasoning_parser="qwen3"``,
``reasoning_config={"reasoning_start_str": "<think>", "reasoning_end_str": "</think>"}``)
enforces thinking budgets: ``GenerateRequest.thinking_budget`` becomes vLLM's
``SamplingParams.thinking_token_budget`` and ``capabilities.thinking_budget`` is true.

Needs the ``[vllm]`` extra; vllm is imported only when a backend is built, so
``paragen --help`` and everything else work without it. Outputs are asked for as
deltas (``RequestOutputKind.DELTA``), so each step costs only its new tokens, and
token counts are exact (``usage.source == "token_ids"``). Leaving the stream early
closes vLLM's generator and aborts the request, which frees its KV cache blocks.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Any

import anyio
from pydantic import Field

from paragen.backends.base import Capabilities, CompletionStream, refuse_tools
from paragen.config import RepetitionDetection
from paragen.errors import ConfigError, EngineError, ParagenError, build_config
from paragen.reasoning import ThinkFormat
from paragen.types import Delta, FinishReason, GenerateRequest, Model, SamplingParams, Usage

_INSTALL = "pip install 'paragen[vllm]'"
_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "repetition": "repetition",  # repetition_detection in extra_sampling stopped it
}


class VLLMConfig(Model):
    """Options of :class:`VLLMBackend`: the common engine arguments, the rest in ``engine_args``."""

    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    max_model_len: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    tensor_parallel_size: int = Field(default=1, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    enable_prefix_caching: bool = True  # n samples of one problem share its prompt's blocks
    enforce_eager: bool = False
    seed: int = 0
    engine_args: dict[str, Any] = Field(default_factory=dict)  # any other AsyncEngineArgs field
    extra_sampling: dict[str, Any] = Field(
        default_factory=dict
    )  # vLLM SamplingParams extras: ignore_eos, ...
    # On every request, as the openai backend's options of the same names: the request priority
    # (with engine_args {"scheduling_policy": "priority"}) and n-gram repetition detection.
    priority: int | None = None
    repetition_detection: RepetitionDetection | None = None
    # Thinking budgets: vLLM enforces SamplingParams.thinking_token_budget once the engine has a
    # reasoning config, which a parser that names its delimiters sets (qwen3, deepseek_r1, olmo3)
    # and reasoning_config sets or overrides: {"reasoning_start_str": ..., "reasoning_end_str": ...},
    # the end string being what the engine writes when a budget is spent.
    reasoning_parser: str | None = None
    reasoning_config: dict[str, str] | None = None
    # How the model marks its thinking in its text (see paragen.reasoning): "think_open" where the
    # chat template opens the thinking, as DeepSeek-R1's does.
    thinking: ThinkFormat = "think"

    def to_engine_kwargs(self) -> dict[str, Any]:
        per_request = {"engine_args", "extra_sampling", "priority", "repetition_detection", "thinking"}
        kwargs = self.model_dump(exclude=per_request, exclude_none=True)
        return {**kwargs, **self.engine_args}


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ConfigError(
            f"the vllm backend needs vLLM, which is not installed ({exc})", hint=_INSTALL
        ) from exc
    return vllm


def _build_engine(config: VLLMConfig) -> Any:
    vllm = import_vllm()
    try:
        from vllm.v1.engine.async_llm import AsyncLLM as Engine
    except ImportError:  # vLLM before the V1 engine
        Engine = vllm.AsyncLLMEngine
    kwargs = with_reasoning_config(config.to_engine_kwargs())
    return Engine.from_engine_args(vllm.AsyncEngineArgs(**cpu_safe(kwargs)))


def with_reasoning_config(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``reasoning_config`` as vLLM's ReasoningConfig (its engine arguments take no dict, as its
    command line's ``--reasoning-config`` JSON does)."""
    strings = kwargs.get("reasoning_config")
    if not isinstance(strings, dict):
        return kwargs
    from vllm.config.reasoning import ReasoningConfig

    try:
        return {**kwargs, "reasoning_config": ReasoningConfig(**strings)}
    except (TypeError, ValueError) as exc:
        hint = "e.g. {'reasoning_start_str': '<think>', 'reasoning_end_str': '</think>'}"
        raise ConfigError(f"bad reasoning_config {strings!r}: {exc}", hint=hint) from exc


def enforces_thinking_budgets(engine: Any) -> bool:
    """The engine was built with a reasoning config that vLLM could turn into token ids."""
    reasoning = getattr(getattr(engine, "vllm_config", None), "reasoning_config", None)
    return bool(getattr(reasoning, "enabled", False))


def cpu_safe(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Whole prefills on vLLM's CPU build unless the user chose otherwise: its CPU worker (0.32)
    crashes on a seeded request whose prefill is chunked ("CPU Generator does not use offset"),
    and every sample paragen sends under a sweep's --seed is seeded."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return {"enable_chunked_prefill": False, **kwargs}
    return kwargs


class VLLMBackend:
    """A vLLM engine in this process. ``engine`` may be given to share one already built."""

    name = "vllm"
    Config = VLLMConfig  # its options, as `paragen backends` lists them

    def __init__(self, config: VLLMConfig, *, engine: Any = None) -> None:
        self.config = config
        self._vllm = import_vllm()
        self.engine = engine if engine is not None else _build_engine(config)
        self._thinking_budgets = enforces_thinking_budgets(self.engine)
        self._tokenizer: Any = None

    @classmethod
    def from_spec(cls, target: str | None, **options: Any) -> VLLMBackend:
        """``vllm:MODEL`` plus engine options (gpu_memory_utilization=, max_model_len=, ...)."""
        if target:
            options["model"] = target
        if "model" not in options:
            raise ConfigError("the vllm backend needs a model", hint="e.g. vllm:Qwen/Qwen3-0.6B")
        config = build_config(
            VLLMConfig, options, what="vllm backend options", hint="other engine args go in engine_args"
        )
        return cls(config)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            native_n=True,
            per_choice_abort=False,  # vLLM aborts a request with all its choices
            logprobs=True,
            top_logprobs=20,
            continue_final=True,
            thinking=self.config.thinking,
            thinking_budget=self._thinking_budgets,
        )

    async def tokenizer(self) -> Any:
        """The engine's tokenizer (awaited on vLLM versions where getting it is async)."""
        if self._tokenizer is None:
            tokenizer = self.engine.get_tokenizer()
            self._tokenizer = await tokenizer if inspect.isawaitable(tokenizer) else tokenizer
        return self._tokenizer

    async def prompt_text(self, request: GenerateRequest) -> str:
        """The raw prompt, with chat messages rendered by the model's chat template."""
        if request.messages is None:
            return request.prompt or ""
        tokenizer = await self.tokenizer()
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        extra = {"continue_final_message": True} if request.continue_final else {}
        text: str = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=not request.continue_final, **extra
        )
        return text

    def sampling_params(self, request: GenerateRequest) -> Any:
        """vLLM's SamplingParams for ``request``, asking for outputs as deltas."""
        from vllm.sampling_params import RequestOutputKind

        params: SamplingParams = request.params
        wants_logprobs = params.logprobs or params.top_logprobs > 0
        knobs: dict[str, Any] = {}
        if self.config.repetition_detection is not None:
            detection = self.config.repetition_detection.model_dump()
            knobs["repetition_detection"] = self._vllm.sampling_params.RepetitionDetectionParams(**detection)
        if request.thinking_budget is not None and self._thinking_budgets:
            # Only where the engine enforces it: vLLM refuses a budget it has no reasoning config for.
            knobs["thinking_token_budget"] = request.thinking_budget
        return self._vllm.SamplingParams(
            n=request.n,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,  # -1 is vLLM's "off" in every version
            seed=params.seed,
            stop=list(params.stop) or None,
            logprobs=params.top_logprobs if wants_logprobs else None,
            output_kind=RequestOutputKind.DELTA,
            **knobs,
            **self.config.extra_sampling,
        )

    def stream(self, request: GenerateRequest) -> _VLLMContext:
        """Stream ``request``; leaving early aborts it in the engine."""
        refuse_tools("vllm", request)
        return _VLLMContext(self, request)

    async def count_tokens(self, text: str) -> tuple[int, str]:
        tokenizer = await self.tokenizer()
        return len(tokenizer.encode(text, add_special_tokens=False)), "tokenizer"

    async def aclose(self) -> None:
        """Stop the engine (its core process included) now, while the event loop still runs.

        AsyncLLM.__del__ shuts down again at interpreter exit, when its output task's loop is
        gone, and prints a traceback; after a shutdown here there is nothing left for it to do.
        """
        engine, self.engine = self.engine, None
        if engine is None:
            return
        for name in ("shutdown", "shutdown_background_loop"):
            stop = getattr(engine, name, None)
            if callable(stop):
                stop()
                break
        for part in ("output_handler", "engine_core", "renderer"):
            if getattr(engine, part, None) is not None:
                setattr(engine, part, None)


class _VLLMContext:
    def __init__(self, backend: VLLMBackend, request: GenerateRequest) -> None:
        self._backend = backend
        self._request = request
        self._request_id = f"{request.request_id}-{uuid.uuid4().hex[:8]}"  # vLLM wants unique ids
        self._stream: _VLLMStream | None = None

    async def __aenter__(self) -> CompletionStream:
        prompt = await self._backend.prompt_text(self._request)
        params = self._backend.sampling_params(self._request)
        priority = self._backend.config.priority
        extra = {} if priority is None else {"priority": priority}
        outputs = self._backend.engine.generate(prompt, params, self._request_id, **extra)
        self._stream = _VLLMStream(outputs, self._request.params.top_logprobs, self._request.n)
        return self._stream

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stream is None:
            return
        with anyio.CancelScope(shield=True):
            await self._stream.aclose()
            if not self._stream.is_finished:
                # Closing vLLM's generator already aborts; saying it again is harmless and
                # covers versions where the close does not reach the engine.
                await self._backend.engine.abort(self._request_id)


class _VLLMStream:
    def __init__(self, outputs: AsyncGenerator[Any, None], top_logprobs: int, num_choices: int) -> None:
        self.usage = Usage(source="token_ids")
        self._top_logprobs = top_logprobs
        self._num_choices = num_choices
        self._cached: dict[int, int] = {}
        self.is_finished = False
        self._outputs = outputs
        self._deltas = self._iterate()

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas

    async def abort(self, index: int) -> None:
        raise ConfigError("vLLM aborts whole requests, not one choice", hint="send n=1 requests")

    async def aclose(self) -> None:
        await self._deltas.aclose()
        await self._outputs.aclose()

    async def _iterate(self) -> AsyncGenerator[Delta, None]:
        try:
            async for output in self._outputs:
                self._take_prompt(output)
                for choice in output.outputs:
                    yield self._delta(choice)
                self.is_finished = bool(output.finished)
        except ParagenError:
            raise
        except Exception as exc:  # e.g. a prompt longer than max_model_len, a dead engine
            raise EngineError(f"vLLM failed the request: {type(exc).__name__}: {exc}") from exc

    def _take_prompt(self, output: Any) -> None:
        """The prompt counts once per choice; vLLM runs each choice of n > 1 as its own request
        and says per choice how much of its prompt came from the prefix cache."""
        if output.prompt_token_ids is None:
            return
        if not self.usage.prompt_tokens:
            self.usage.prompt_tokens = len(output.prompt_token_ids) * self._num_choices
        cached = getattr(output, "num_cached_tokens", None)
        if cached is not None:
            for choice in output.outputs:
                self._cached[choice.index] = cached
            self.usage.cached_prompt_tokens = sum(self._cached.values())

    def _delta(self, choice: Any) -> Delta:
        token_ids = tuple(choice.token_ids)
        self.usage.completion_tokens += len(token_ids)
        logprobs, tops = _logprobs(token_ids, choice.logprobs, self._top_logprobs)
        finish = None if choice.finish_reason is None else _FINISH.get(choice.finish_reason, "stop")
        return Delta(
            choice.index,
            choice.text,
            len(token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
            top_logprobs=tops,
            finish_reason=finish,
        )


def _logprobs(
    token_ids: tuple[int, ...], entries: list[dict[int, Any]] | None, k: int
) -> tuple[tuple[float, ...] | None, tuple[tuple[float, ...], ...] | None]:
    """vLLM gives, per token, a dict token id -> Logprob: the top k, plus the sampled token
    when it is not among them (hence the cut to k)."""
    if entries is None:
        return None, None
    chosen = tuple(entry[tid].logprob for tid, entry in zip(token_ids, entries, strict=False))
    if k == 0:
        return chosen, None
    tops = tuple(tuple(sorted((lp.logprob for lp in entry.values()), reverse=True)[:k]) for entry in entries)
    return chosen, tops
