"""The "engine" backend: paragen's own in-process engine behind the Backend contract.

torch is imported only when a backend is built (``from_spec``), so listing backends or
``paragen --help`` stays light.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paragen.backends.base import Capabilities, Capacity, SharedRow, SharedSample, refuse_tools
from paragen.errors import ConfigError, EngineError
from paragen.types import Delta, GenerateRequest, SamplingParams, Usage

if TYPE_CHECKING:
    from paragen.engine.async_engine import AsyncEngine
    from paragen.engine.hogwild.session import EngineSharedSession
    from paragen.engine.llm_engine import LLMEngine, StepOutput
    from paragen.engine.sequence import Sequence as EngineSeq
    from paragen.engine.streams import Request
    from paragen.engine.thinking import ThinkingSpec


class EngineConfig(BaseModel):
    """Options of the engine backend (``--backend engine:MODEL`` plus these)."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "bfloat16", "bf16", "float32", "fp32"] = "auto"
    device: str = "cpu"
    kv_cache_mb: int = Field(default=1024, gt=0)
    num_blocks: int | None = Field(default=None, gt=0)
    block_size: int = Field(default=16, gt=0)
    max_batch: int = Field(default=256, gt=0)
    threads: int | None = Field(default=None, gt=0)
    # The chat template's thinking switch (Qwen3's ``enable_thinking``); None: the template's default.
    enable_thinking: bool | None = None


CAPABILITIES = Capabilities(
    native_n=True,
    per_choice_abort=True,
    logprobs=True,
    top_logprobs=20,
    shared_cache=True,
    raw_prompt=True,
    chat=True,
    continue_final=True,
    fork=True,
)


class EngineBackend:
    """Generates with the in-process engine: native n with a shared prompt prefill, real aborts."""

    name = "engine"
    Config = EngineConfig  # its options, as `paragen backends` lists them

    def __init__(self, engine: LLMEngine, *, enable_thinking: bool | None = None):
        from paragen.engine.async_engine import AsyncEngine

        self.template_options = template_options(engine.tokenizer, enable_thinking)
        self.engine = engine
        # Budgets are enforced in the engine itself (paragen/engine/thinking.py), and declared where
        # the model's chat template has a thinking section: a model that never thinks (SmolLM2) has
        # no thought for the engine to end, so strategies keep their client-side methods there.
        thinks = "<think>" in str(getattr(engine.tokenizer, "chat_template", None) or "")
        self._capabilities = CAPABILITIES.model_copy(update={"thinking_budget": thinks})
        self.runtime: AsyncEngine = AsyncEngine(engine)

    @classmethod
    def from_spec(cls, target: str | None, **options: Any) -> EngineBackend:
        """Load ``target`` (a checkpoint directory, hub id or .gguf file; None = SmolLM2-135M-Instruct)."""
        from paragen.engine.llm_engine import LLMEngine

        try:
            config = EngineConfig(**options)
        except ValidationError as exc:
            raise ConfigError(
                f"bad engine option: {exc}", hint=f"options: {sorted(EngineConfig.model_fields)}"
            ) from exc
        engine_options = config.model_dump(exclude={"enable_thinking"})
        engine = _built_off_this_thread(lambda: LLMEngine(target, **engine_options))
        return cls(engine, enable_thinking=config.enable_thinking)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def prompt_ids(self, request: GenerateRequest) -> list[int]:
        """The request rendered and tokenized (chat template from the model's own tokenizer)."""
        tok = self.engine.tokenizer
        if request.prompt is not None:
            return list(tok(request.prompt)["input_ids"])
        assert request.messages is not None
        messages = [m.model_dump() for m in request.messages]
        text = tok.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=not request.continue_final,
            continue_final_message=request.continue_final,
            **self.template_options,
        )
        return list(tok(text, add_special_tokens=False)["input_ids"])

    @asynccontextmanager
    async def stream(self, request: GenerateRequest) -> AsyncIterator[EngineStream]:
        refuse_tools("engine", request)
        prompt_ids = self.prompt_ids(request)
        seqs = self.engine.new_request(
            prompt_ids, request.params, request.n, thinking=self._thinking(request, prompt_ids)
        )
        handle = self.runtime.submit(prompt_ids, seqs)
        stream = EngineStream(self.runtime, handle, request, prompt_ids)
        try:
            yield stream
        finally:
            await stream.close()

    def _thinking(self, request: GenerateRequest, prompt_ids: list[int]) -> ThinkingSpec | None:
        from paragen.engine.thinking import thinking_spec

        budget = request.thinking_budget
        if budget is None:
            return None
        return thinking_spec(self.engine.tokenizer, prompt_ids, budget, self.capabilities.thinking)

    @asynccontextmanager
    async def fork(
        self, parent: EngineStream, index: int, num_tokens: int, suffix: str, request: GenerateRequest
    ) -> AsyncIterator[EngineStream]:
        """Choice ``index`` of ``parent`` after its first ``num_tokens`` tokens, then ``suffix``,
        generated as ``request.params`` say (a probe). It starts from the parent's cache (its blocks
        shared, the last partial one copied) if the parent still runs, so only ``suffix`` is
        prefilled; leaving frees the fork's blocks. ``request`` is its text form, for the books."""
        ids = parent.prompt_ids + parent.token_ids[index][:num_tokens] + self._token_ids(suffix)
        async with self._started_from(parent.handle.seq_ids[index], ids, request, None) as stream:
            yield stream

    @asynccontextmanager
    async def beside(self, leader: EngineStream, request: GenerateRequest) -> AsyncIterator[EngineStream]:
        """``request`` (one sample) started from the cache of ``leader``'s first choice where their
        prompts agree, once the leader's prompt is prefilled: the shared prefix is prefilled once
        for both. A leader that has already ended leaves ``request`` to a full prefill."""
        await leader.prefilled.wait()
        ids = self.prompt_ids(request)
        thinking = self._thinking(request, ids)
        async with self._started_from(leader.handle.seq_ids[0], ids, request, thinking) as stream:
            yield stream

    def siblings(self) -> Siblings:
        """An opener for the requests of one fan-out whose prompts share a prefix (see Siblings)."""
        return Siblings(self)

    @asynccontextmanager
    async def _started_from(
        self, parent_id: int, ids: list[int], request: GenerateRequest, thinking: ThinkingSpec | None
    ) -> AsyncIterator[EngineStream]:
        (seq,) = self.engine.new_request(ids, request.params, 1, thinking=thinking)
        seq.fork_of = parent_id  # attached on the step thread, if the parent still runs then
        stream = EngineStream(self.runtime, self.runtime.submit(ids, [seq]), request, ids, fork=seq)
        try:
            yield stream
        finally:
            await stream.close()

    @asynccontextmanager
    async def shared_session(
        self, params: SamplingParams, *, num_workers: int
    ) -> AsyncIterator[AsyncSharedSession]:
        """Hogwild! workers over one KV cache; leaving (however) frees every segment's blocks."""
        from paragen.engine.hogwild.session import EngineSharedSession

        engine_session = EngineSharedSession(self.engine, params, num_workers)
        session = AsyncSharedSession(
            self.runtime, engine_session, self.engine.tokenizer, self.template_options
        )
        try:
            yield session
        finally:
            # Queued behind any forward still running for a cancelled caller, so nothing frees
            # blocks that a pass is writing; shielded, so a cancelled caller still waits for it.
            await self.runtime.call_shielded(engine_session.close)

    def capacity(self) -> Capacity:
        """What the engine holds at once: its batch slots, its KV cache's tokens, one sequence's tokens."""
        blocks, scheduler = self.engine.blocks, self.engine.scheduler
        return Capacity(
            what="the engine",
            sequences=scheduler.max_batch,
            tokens=blocks.num_blocks * blocks.block_size,
            sequence_tokens=scheduler.max_seq_len - 1,
        )

    def check_fits(self, num_prompt_tokens: int, n: int) -> None:
        """Raise the engine's own EngineError when ``n`` samples of such a prompt can never be held."""
        self.engine.check_fits(num_prompt_tokens, n)

    def model_info(self) -> dict[str, Any]:
        """The model that answers (run records name it): name, path, file sha256 (cached per file)."""
        from paragen.engine.provenance import describe

        return describe(self.engine.target, self.engine.model_dir)

    async def count_tokens(self, text: str) -> tuple[int, str]:
        # In a worker thread: a long text must not hold the event loop, and the await is where a
        # run's deadline reaches a strategy that counts in a loop (PDR trimming its workspace).
        ids = await anyio.to_thread.run_sync(self._token_ids, text, abandon_on_cancel=True)
        return len(ids), "tokenizer"

    def _token_ids(self, text: str) -> list[int]:
        ids: list[int] = self.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    async def aclose(self) -> None:
        await self.runtime.aclose()


class EngineStream:
    """Deltas of one request, one per generated token per choice; ``usage`` counts as they come."""

    def __init__(
        self,
        runtime: AsyncEngine,
        handle: Request,
        request: GenerateRequest,
        prompt_ids: list[int],
        *,
        fork: EngineSeq | None = None,
    ):
        self.runtime = runtime
        self.handle = handle
        self.prompt_ids = prompt_ids
        self.token_ids: list[list[int]] = [[] for _ in handle.seq_ids]  # what a fork continues
        self._fork = fork
        self.index_of = {seq_id: i for i, seq_id in enumerate(handle.seq_ids)}
        self.is_open = [True] * len(handle.seq_ids)
        self.wants_logprobs = request.params.logprobs
        self.num_top = request.params.top_logprobs
        n, p = len(handle.seq_ids), handle.num_prompt_tokens
        # n samples count n prompts; all but the first are served from the one shared prefill.
        self.usage = Usage(prompt_tokens=n * p, cached_prompt_tokens=(n - 1) * p, source="token_ids")
        self._pending: list[Delta] = []
        # Set once the prompt is in the cache (the first token came) or the stream is closed:
        # from then on a sibling can start from this stream's cache (EngineBackend.beside).
        self.prefilled = anyio.Event()

    def __aiter__(self) -> EngineStream:
        return self

    async def __anext__(self) -> Delta:
        while not self._pending:
            if not any(self.is_open):
                raise StopAsyncIteration
            try:
                item = await self.handle.receive.receive()
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
            finally:
                if not self.prefilled.is_set():  # once: this loop runs for every engine step
                    self.prefilled.set()
            self._took_one()
            if isinstance(item, BaseException):
                raise item if isinstance(item, EngineError) else EngineError(repr(item))
            if self._fork is not None:  # known once the step thread has attached it
                self.usage.cached_prompt_tokens = self._fork.num_reused_tokens
            self._pending = [d for out in item if (d := self._delta(out)) is not None]
        return self._pending.pop(0)

    def _took_one(self) -> None:
        if self.handle.sink.took_one():  # this reader had stalled its sequences: they may run again
            self.runtime.wake()

    def _delta(self, out: StepOutput) -> Delta | None:
        index = self.index_of[out.seq_id]
        if not self.is_open[index]:
            return None  # aborted by the caller; outputs already in flight are dropped
        self.usage.completion_tokens += 1
        self.token_ids[index].append(out.token_id)
        if out.finish_reason is not None:
            self.is_open[index] = False
        return Delta(
            index=index,
            text=out.text,
            num_tokens=1,
            token_ids=(out.token_id,),
            logprobs=(out.logprob,) if self.wants_logprobs and out.logprob is not None else None,
            top_logprobs=(tuple(out.top_logprobs),)
            if self.num_top and out.top_logprobs is not None
            else None,
            finish_reason=out.finish_reason,  # type: ignore[arg-type]
        )

    async def abort(self, index: int) -> None:
        """Stop choice ``index`` and free its cache; the other choices go on."""
        if not 0 <= index < len(self.is_open):
            raise IndexError(f"no choice {index}")
        if self.is_open[index]:
            self.is_open[index] = False
            self._pending = [d for d in self._pending if d.index != index]
            await self.runtime.abort_and_wait([self.handle.seq_ids[index]])

    async def close(self) -> None:
        """Abort every unfinished choice and wait until their cache is free."""
        open_ids = [seq_id for seq_id, i in self.index_of.items() if self.is_open[i]]
        self.is_open = [False] * len(self.is_open)
        self.prefilled.set()
        self.handle.close()
        if open_ids:
            await self.runtime.abort_and_wait(open_ids)


class AsyncSharedSession:
    """The engine backend's ``SharedSession``: an ``EngineSharedSession`` whose every call that touches
    the cache runs on the engine's step thread (``AsyncEngine``)."""

    def __init__(
        self,
        runtime: AsyncEngine,
        session: EngineSharedSession,
        tokenizer: Any,
        template_options: dict[str, Any] | None = None,
    ):
        self.runtime = runtime
        self.session = session
        self.tokenizer = tokenizer
        self.template_options = template_options or {}
        self._decode = fast_decode(tokenizer)
        self.eos_token_ids = frozenset(session.engine.eos_ids)
        self.max_view_tokens = int(session.engine.cfg.max_position_embeddings)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def detokenize(self, token_ids: Sequence[int]) -> str:
        text: str = self._decode(list(token_ids))
        return text

    def apply_chat_template(self, messages: Sequence[dict[str, str]]) -> str:
        text: str = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=True, **self.template_options
        )
        return text

    @property
    def num_reused_tokens(self) -> int:
        return self.session.num_reused_tokens

    def segment_length(self, segment: int) -> int:
        return self.session.length(segment)

    async def new_segment(self) -> int:
        return await self.runtime.call(self.session.new_segment)

    async def new_segments(self, count: int) -> list[int]:
        return await self.runtime.call(lambda: [self.session.new_segment() for _ in range(count)])

    async def forward(
        self, rows: Sequence[SharedRow], *, suppress_token_ids: Sequence[int] = (), greedy: bool = False
    ) -> list[SharedSample]:
        from paragen.engine.hogwild.batch import SharedForward, forward_together

        # Batched with the other sessions' passes waiting on the step thread: one forward for all.
        job = SharedForward(self.session, list(rows), tuple(suppress_token_ids), greedy)
        return await self.runtime.call_batched(forward_together, job, caller=self)

    async def free_segment(self, segment: int) -> None:
        await self.runtime.call(partial(self.session.free_segment, segment))

    async def append_from(self, dst: int, src: int, *, clear: bool = False) -> None:
        session = self.session

        def fold() -> None:
            session.append_from(dst, src)
            if clear:
                session.clear_segment(src)

        await self.runtime.call(fold)


def template_options(tokenizer: Any, enable_thinking: bool | None) -> dict[str, Any]:
    """What every chat template rendering is given beside the messages: the thinking switch, where
    it is set. A template without the switch would ignore it silently, so that model is refused."""
    if enable_thinking is None:
        return {}
    if "enable_thinking" not in str(getattr(tokenizer, "chat_template", None) or ""):
        raise ConfigError(
            "enable_thinking is set but the model's chat template has no thinking switch",
            hint="leave enable_thinking unset for this model",
        )
    return {"enable_thinking": enable_thinking}


def _built_off_this_thread(build: Callable[[], LLMEngine]) -> LLMEngine:
    """``build()`` run on a thread of its own that ends with it.

    OpenMP keeps a pool of worker threads for each thread that starts parallel work, and libgomp
    stops its workers spinning between parallel regions once it manages more threads than there
    are cores. Loading the model on the caller's thread (parallel copies and casts) would leave a
    pool there; the engine then steps on its own thread with a second pool, whose workers would be
    woken from sleep for each of a forward's ~400 parallel operators, slowing every pass on a
    machine with few cores. A pool whose thread has ended is freed with it.
    """
    made: list[LLMEngine] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(build())
        except BaseException as exc:  # re-raised on the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="paragen-engine-load")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def fast_decode(tokenizer: Any) -> Callable[[list[int]], str]:
    """``tokenizer.decode`` without transformers' per-call conversions where it adds nothing.

    Every worker's every token is decoded twice a pass (the text before it and after), and the
    wrapper's argument conversions cost more than the Rust tokenizer's decode itself, which gives
    the same text for a fast tokenizer that does not clean up spaces.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return cast(Callable[[list[int]], str], tokenizer.decode)
    return partial(backend.decode, skip_special_tokens=False)


class Siblings:
    """Opens the requests of one fan-out whose prompts share a long prefix (a fork/join reasoner's
    children: the trunk, then each child's own header). The first request opened is the leader and
    is prefilled whole; each later one-sample request waits for that prefill and starts from the
    leader's cache where their tokens agree (EngineBackend.beside), so the shared prefix is
    prefilled once for all of them instead of once each."""

    def __init__(self, backend: EngineBackend):
        self._backend = backend
        self._leader: EngineStream | None = None

    @asynccontextmanager
    async def __call__(self, request: GenerateRequest) -> AsyncIterator[EngineStream]:
        leader = self._leader
        if leader is not None and request.n == 1:
            async with self._backend.beside(leader, request) as stream:
                yield stream
            return
        # Nothing awaits between here and the stream's creation, so the first caller leads.
        async with self._backend.stream(request) as stream:
            self._leader = self._leader or stream
            yield stream
