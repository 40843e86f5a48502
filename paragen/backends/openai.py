"""OpenAI-compatible HTTP backend: vLLM, SGLang, llama.cpp, or any /v1 server, over httpx.

    backend = OpenAIBackend.from_spec("http://localhost:8000/v1", model="Qwen/Qwen3-0.6B")
    async with backend.stream(GenerateRequest(prompt="2+2=")) as stream:
        async for delta in stream:
            print(delta.text, end="")

Each server is probed once (GET /v1/models: which model, which server kind) by
:meth:`OpenAIBackend.open`, which the Orchestrator calls before the first problem (a
backend used directly probes on first use), and the kind decides what the server can
do: llama.cpp refuses ``n > 1``, vLLM
streams usage on every chunk, SGLang can be told to abort a request by id. Leaving
the stream early closes the HTTP response, which is what makes vLLM and llama.cpp
abort the generation; SGLang additionally gets ``POST /abort_request``.

Retries (connect errors, timeouts, 5xx, 429 with its Retry-After) move to another
replica where there is one; a single-choice stream cut off mid-way is resumed from
the text seen so far (see :mod:`paragen.backends.openai_resume`; the layers of one request are
:mod:`paragen.backends.openai_stream`'s). With ``hedge_after_s``, a
request whose first token is late goes to a second replica too, and the first copy to stream
a token wins (see :mod:`paragen.backends.openai_hedge`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import httpx

from paragen.backends.base import Capabilities, Capacity, estimate_tokens
from paragen.backends.openai_config import OpenAIConfig, ServerInfo
from paragen.backends.openai_http import map_http_errors, raise_for_status
from paragen.backends.openai_stream import StreamContext
from paragen.backends.openai_wire import THINKING_BUDGET_FIELD, Endpoint, ServerKind
from paragen.backends.pool import Pool, Replica
from paragen.backends.routing import HEADERS
from paragen.errors import BackendError, BackendProtocolError, ConfigError, build_config
from paragen.types import GenerateRequest

_KINDS: dict[str, ServerKind] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama_cpp",
    "me": "llama_cpp",
}
# Servers of a kind that takes thinking budgets that nevertheless enforce none, by owned_by:
# llama-cpp-python's (read as llama.cpp) takes no budget field and thinks as long as it likes.
_NO_BUDGETS = {"me": "llama-cpp-python's server"}
# llama.cpp's C++ llama-server (owned_by "llamacpp") continues a reply whose last message is the
# assistant's (its prefill_assistant, on unless started with --no-prefill-assistant); the
# llama-cpp-python server opens a new turn after it.
_CONTINUES_REPLIES = "llamacpp"
# Tokenize endpoints by server kind, tried in order (path relative to the root, body builder).
_TOKENIZE: dict[str, list[str]] = {"vllm": ["/tokenize"], "llama_cpp": ["/extras/tokenize", "/tokenize"]}


class OpenAIBackend:
    """A client of one OpenAI-compatible server, or a pool of replicas of one model."""

    name = "openai"
    Config = OpenAIConfig  # its options, as `paragen backends` lists them

    def __init__(self, config: OpenAIConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.pool = Pool(
            [config.base_url, *config.base_urls],
            max_outstanding=config.max_outstanding,
            affinity_slack=config.affinity_slack,
        )
        key = config.resolved_key()
        self._client = httpx.AsyncClient(
            transport=transport,
            headers={"Authorization": f"Bearer {key}"} if key else None,
            timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
            limits=httpx.Limits(max_connections=config.max_connections, max_keepalive_connections=64),
        )
        self._tokenize: dict[str, str | None] = {}  # replica url -> working tokenize path (None: none)
        # Prompt counts for servers that stream no usage (llama-cpp-python): n samples of one prompt
        # cost one tokenize request, not n.
        self._prompt_counts: dict[str, tuple[int, str]] = {}
        self._opened = False  # open() probes once; replicas down then are the health check's
        self._watched = False  # a background task (watch_health) checks down replicas, not requests

    @classmethod
    def from_spec(cls, target: str | None, **options: Any) -> OpenAIBackend:
        """Build from ``openai:URL`` plus options (model=, api_key_env=, base_urls=, ...)."""
        if target:
            options["base_url"] = target
        if "base_url" not in options:
            raise ConfigError(
                "the openai backend needs a server URL", hint="e.g. openai:http://localhost:8000/v1"
            )
        transport = options.pop("transport", None)
        config = build_config(
            OpenAIConfig, options, what="openai backend options", hint="see docs/openai-backend.md"
        )
        return cls(config, transport=transport)

    def __repr__(self) -> str:
        return f"OpenAIBackend({', '.join(r.url for r in self.pool.replicas)})"

    @property
    def capabilities(self) -> Capabilities:
        """What the servers can do; config defaults until :meth:`open` has probed them."""
        probed = [r.info for r in self.pool.replicas if r.info is not None]
        info: ServerInfo | None = probed[0] if probed else None
        endpoint = self.config.endpoint
        kind = info.kind if info else (self.config.server if self.config.server != "auto" else "openai")
        return Capabilities(
            native_n=info.native_n if info else bool(self.config.native_n),
            per_choice_abort=False,  # server-side n > 1 can only be aborted all together
            logprobs=True,
            top_logprobs=20 if kind != "llama_cpp" else 10,
            raw_prompt=endpoint != "chat",
            chat=endpoint != "completions",
            continue_final=endpoint != "completions"
            and (info.continues_replies if info else kind in ("vllm", "sglang")),
            tools=endpoint != "completions",
            thinking=self.config.thinking.format,
            thinking_budget=self.config.enforces_thinking_budgets and kind in THINKING_BUDGET_FIELD,
            routing_header=None if self.config.gateway is None else HEADERS[self.config.gateway],
        )

    async def open(self) -> Capabilities:
        """Probe every replica now, so :attr:`capabilities` are true before a strategy reads them.

        A configuration mistake (a base URL without ``/v1``, no model) is raised at once. A
        replica that cannot be reached is marked down, to be retried by the pool's health
        check, as long as another one answers; if none does, the first failure is raised.
        Once one has answered, later calls probe nothing (every run's Orchestrator calls it).
        """
        if self._opened:
            return self.capabilities
        failure: BackendError | None = None
        for replica in self.pool.replicas:
            try:
                await self.server_info(replica)
            except ConfigError:
                raise
            except BackendError as exc:
                self.pool.mark_down(replica)
                failure = failure or exc
        if failure is not None and not any(r.info is not None for r in self.pool.replicas):
            raise failure
        self._opened = True
        return self.capabilities

    probe = open

    async def server_info(self, replica: Replica) -> ServerInfo:
        """The probe result of ``replica``, probing it once (concurrent callers wait for one probe)."""
        async with replica.lock:
            if replica.info is None:
                replica.info = await self._probe(replica)
            info: ServerInfo = replica.info
            return info

    async def _probe(self, replica: Replica) -> ServerInfo:
        url = f"{replica.url}/models"
        with map_http_errors(url):
            response = await self._client.get(url)
        models: list[dict[str, Any]] = []
        if response.status_code == 404:  # some servers have no /models; then the config must name one
            await self._fail_without_v1(replica)
        else:
            await raise_for_status(response)
            models = [m for m in _json(response, url).get("data", []) if isinstance(m, dict)]
        kind = self.config.server if self.config.server != "auto" else _kind(models)
        self.config.check_knobs(kind, replica.url)
        self._refuse_unenforced_budgets(models, replica.url)
        model = self.config.model or (str(models[0]["id"]) if models and "id" in models[0] else None)
        if model is None:
            raise ConfigError(
                f"{replica.url} lists no model", hint="name one with the model option (--model)"
            )
        native_n = self.config.native_n if self.config.native_n is not None else kind != "llama_cpp"
        continuous = (
            self.config.continuous_usage if self.config.continuous_usage is not None else kind == "vllm"
        )
        listed = next((m for m in models if m.get("id") == model), models[0] if models else None)
        return ServerInfo(
            kind=kind,
            model=model,
            native_n=native_n,
            continuous_usage=continuous,
            listed=_small(listed),
            context_length=await self._context_length(replica, kind, listed),
            continues_replies=kind in ("vllm", "sglang") or _CONTINUES_REPLIES in _owners(models),
        )

    async def _context_length(self, replica: Replica, kind: str, listed: dict[str, Any] | None) -> int | None:
        """Tokens per sequence: vLLM lists ``max_model_len``; llama-server says ``n_ctx`` in /props."""
        value = (listed or {}).get("max_model_len")
        if value is None and kind == "llama_cpp":
            with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
                response = await self._client.get(f"{replica.root}/props", timeout=2.0)
                if response.is_success:
                    value = response.json().get("default_generation_settings", {}).get("n_ctx")
        return value if isinstance(value, int) and value > 0 else None

    def capacity(self) -> Capacity:
        """The first probed server's context length (vLLM refuses a request past it; others cut)."""
        info = next((r.info for r in self.pool.replicas if r.info is not None), None)
        return Capacity(
            what="the server",
            sequence_tokens=info.context_length if info else None,
            hard_context=info is not None and info.kind == "vllm",
        )

    def model_info(self) -> dict[str, Any]:
        """The model that answers (run records name it): the served id and what the server lists."""
        info = next((r.info for r in self.pool.replicas if r.info is not None), None)
        if info is None:
            return {"name": self.config.model}
        return {"name": info.model, "server": info.kind, "listed": info.listed}

    def _refuse_unenforced_budgets(self, models: list[dict[str, Any]], url: str) -> None:
        """Thinking budgets asked of a server that would ignore them: refused, or a strategy would
        trust the server to end each thought at its budget and none would end."""
        if not self.config.thinking.enforces_budgets:
            return
        ignoring = sorted(_owners(models) & _NO_BUDGETS.keys())
        if ignoring:
            raise ConfigError(
                f"{url} is {_NO_BUDGETS[ignoring[0]]}, which enforces no thinking budget",
                hint="drop thinking_budgets and thinking_token_budget, or serve it with llama-server",
            )

    async def _fail_without_v1(self, replica: Replica) -> None:
        """A base URL that lacks ``/v1`` is the usual mistake: say so when ``URL/v1`` answers."""
        if replica.url.endswith("/v1"):
            return
        url = f"{replica.url}/v1/models"
        with contextlib.suppress(httpx.HTTPError):
            if (await self._client.get(url)).status_code == 200:
                raise ConfigError(
                    f"{replica.url} is not an OpenAI API base URL (it has no /models, {url} answers)",
                    hint=f"use {replica.url}/v1",
                )

    def endpoint_for(self, request: GenerateRequest) -> Endpoint:
        """Which API serves ``request``: completions for raw prompts, chat for messages."""
        if self.config.endpoint == "chat":
            return "chat"
        if request.messages is not None:
            if self.config.endpoint == "completions":
                raise ConfigError(
                    "chat messages sent to a completions-only backend", hint="use endpoint='chat' or 'auto'"
                )
            return "chat"
        return "completions"

    def stream(self, request: GenerateRequest) -> StreamContext:
        """Stream ``request``'s deltas; see :mod:`paragen.backends.base` for the contract."""
        self.endpoint_for(request)  # fail on a wrong input before any I/O
        return StreamContext(self, request)

    async def check_health(self) -> None:
        """Ask each down replica that is due (GET /models) whether it is back; take it back if so.

        Requests call this before each attempt, unless :meth:`watch_health` runs."""
        if not self._watched:
            await self._check_due()

    async def watch_health(self) -> None:
        """Check the down replicas in the background, every ``pool.health_interval``, until
        cancelled (a server's lifetime): no request then waits on a dead replica's check."""
        self._watched = True
        try:
            while True:
                await self._check_due()
                await anyio.sleep(self.pool.health_interval)
        finally:
            self._watched = False

    async def _check_due(self) -> None:
        for replica in self.pool.due_for_check():
            with contextlib.suppress(httpx.HTTPError):
                response = await self._client.get(f"{replica.url}/models", timeout=2.0)
                if response.is_success:
                    self.pool.mark_up(replica)

    async def count_prompt(self, text: str) -> tuple[int, str]:
        """``count_tokens`` of a prompt, remembered: a server streaming no usage is asked once per prompt."""
        if text not in self._prompt_counts:
            try:
                counted = await self.count_tokens(text)
            except BackendError:  # the sample is done: a count that cannot be had is estimated
                return estimate_tokens(text), "estimate"
            if len(self._prompt_counts) >= 1024:
                self._prompt_counts.pop(next(iter(self._prompt_counts)))
            self._prompt_counts[text] = counted
        return self._prompt_counts[text]

    async def count_tokens(self, text: str) -> tuple[int, str]:
        """Count with the server's tokenizer where it has an endpoint for it, else estimate."""
        replica = self.pool.replicas[0]
        info = await self.server_info(replica)
        for path in self._tokenize_paths(replica, info):
            count = await self._tokenize_at(replica, path, info, text)
            if count is not None:
                self._tokenize[replica.url] = path
                return count, "tokenizer"
        self._tokenize[replica.url] = None
        return estimate_tokens(text), "estimate"

    def _tokenize_paths(self, replica: Replica, info: ServerInfo) -> list[str]:
        if replica.url in self._tokenize:
            known = self._tokenize[replica.url]
            return [] if known is None else [known]
        return _TOKENIZE.get(info.kind, [])

    async def _tokenize_at(self, replica: Replica, path: str, info: ServerInfo, text: str) -> int | None:
        url = replica.root + path
        # One body for all: vLLM reads model/prompt, llama-cpp-python input, llama.cpp content.
        body = {
            "model": info.model,
            "prompt": text,
            "input": text,
            "content": text,
            "add_special_tokens": False,
        }
        with map_http_errors(url):
            response = await self._client.post(url, json=body)
        if response.status_code in (404, 405, 422):
            return None
        await raise_for_status(response)
        data = _json(response, url)
        return int(data["count"]) if "count" in data else len(data.get("tokens", []))

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client


def _owners(models: list[dict[str, Any]]) -> set[str]:
    return {str(m.get("owned_by", "")).lower() for m in models}


def _small(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    """A /models entry without what would bloat a record (llama.cpp's long metadata lists)."""
    if entry is None:
        return None
    return {k: v for k, v in entry.items() if len(json.dumps(v, default=str)) <= 512}


def _kind(models: list[dict[str, Any]]) -> ServerKind:
    owners = _owners(models)
    for owner, kind in _KINDS.items():
        if owner in owners:
            return kind
    return "openai"


def _json(response: httpx.Response, url: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError as exc:
        raise BackendProtocolError(f"{url}: answer is not JSON") from exc
    return data if isinstance(data, dict) else {}
