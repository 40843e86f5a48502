"""The ASGI app: /v1/chat/completions, /v1/completions, /v1/responses, /v1/models, /health and /metrics
(Prometheus' text format, see paragen.metrics), on Starlette.

Every error answer has OpenAI's shape (``{"error": {...}}``); unknown routes and methods
too. The API key, when the server has one, is compared in constant time and appears in
no log line and no answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from paragen import tracing
from paragen.backends.base import Backend
from paragen.metrics import CONTENT_TYPE
from paragen.named_backends import close_backends
from paragen.serve.config import ServeConfig
from paragen.serve.errors import APIError, bad_request, from_validation, internal_error
from paragen.serve.health import start_health_checks
from paragen.serve.replies import ChatWire
from paragen.serve.responses import RunResponse, RunStream, error_response
from paragen.serve.responses_api import ResponsesRequest, ResponsesWire, new_id
from paragen.serve.routing import AnyRequest
from paragen.serve.service import Service
from paragen.serve.wire import ChatRequest, CompletionRequest

log = logging.getLogger("paragen.serve")


class Handlers:
    """The routes, over one Service (one backend for every request)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.created = int(time.time())
        key = service.config.api_key
        self._key = None if key is None else _digest(key.get_secret_value())

    async def chat(self, request: Request) -> Response:
        return await self._complete(request, ChatRequest)

    async def completions(self, request: Request) -> Response:
        return await self._complete(request, CompletionRequest)

    async def responses(self, request: Request) -> Response:
        self._authorize(request)
        body = await self._read_json(request)
        try:
            parsed = ResponsesRequest.model_validate(body, strict=True)
            chat = parsed.chat()
        except ValidationError as exc:
            raise from_validation(exc) from None
        plan = self.service.router.plan(chat)
        plan.id = new_id()
        await self.service.check_prompt(plan)
        wire = ResponsesWire(plan, parsed)
        if parsed.stream:
            return RunStream(self.service, plan, wire, events=parsed.paragen.events)
        return RunResponse(self.service, plan, wire)

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        config, router = self.service.config, self.service.router
        data = [self._model(name) for name in config.model_names]
        for strategy in router.strategies():
            data.append(
                {**self._model(f"{strategy}/{config.model_names[0]}"), "paragen": {"strategy": strategy}}
            )
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", **self.service.stats.as_dict()})

    async def metrics(self, request: Request) -> Response:
        metrics = self.service.metrics
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def _complete(self, request: Request, kind: type[AnyRequest]) -> Response:
        self._authorize(request)
        body = await self._read_json(request)
        try:
            parsed = kind.model_validate(body, strict=True)
        except ValidationError as exc:
            raise from_validation(exc) from None
        plan = self.service.router.plan(parsed)
        self.service.check_tools(plan)
        await self.service.check_prompt(plan)
        options = parsed.paragen
        wire = ChatWire(plan, include_result=options.include_result, include_usage=parsed.include_usage)
        if parsed.stream:
            return RunStream(self.service, plan, wire, events=options.events)
        return RunResponse(self.service, plan, wire)

    def _authorize(self, request: Request) -> None:
        if self._key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # Digests of equal length compared in constant time: timing tells neither the key nor its length.
        ok = hmac.compare_digest(_digest(given.strip()), self._key)
        if not (ok and scheme.lower() == "bearer"):
            raise APIError(
                401,
                "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                code="invalid_api_key",
            )

    async def _read_json(self, request: Request) -> dict[str, Any]:
        limit = self.service.config.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        raw = bytearray()
        async for part in request.stream():
            raw += part
            if len(raw) > limit:
                raise _too_large(limit)
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from None
        except RecursionError:
            raise _too_deep() from None
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object", code="invalid_json")
        if _depth_exceeds(body, MAX_DEPTH):
            raise _too_deep()
        return body

    def _model(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "paragen"}


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


# No request of any API nests deeper than a few levels; a bound keeps every later walk of the body
# (validation, a strategy's config, logging) clear of Python's recursion limit.
MAX_DEPTH = 64


def _depth_exceeds(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (walked without recursion)."""
    level: list[object] = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


def _too_deep() -> APIError:
    return bad_request(f"the body nests deeper than {MAX_DEPTH} levels", code="invalid_json")


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the body is larger than this server takes ({limit} bytes)", code="body_too_large")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    what = {404: "no such route", 405: "method not allowed"}.get(exc.status_code, exc.detail)
    error = APIError(exc.status_code, f"{what}: {request.method} {request.url.path}", code="not_found")
    if exc.status_code == 405:
        error.code = "method_not_allowed"
    return error_response(error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(internal_error())


def create_app(
    backend: Backend,
    config: ServeConfig,
    *,
    close_backend: bool = True,
    backends: Mapping[str, Backend] | None = None,
) -> Starlette:
    """The app serving ``backend``; with ``close_backend`` the backend is closed at shutdown, and the
    named ``backends`` (those a request's strategy may read with, ``reader=NAME``) with it."""
    service = Service(backend, config, backends=backends)
    handlers = Handlers(service)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with anyio.create_task_group() as tg:
                await start_health_checks(backend, tg)
                yield
                tg.cancel_scope.cancel()
        finally:
            await service.scorers.aclose()
            if close_backend:
                await close_backends([backend, *service.backends.values()])

    routes = [
        Route("/v1/chat/completions", handlers.chat, methods=["POST"]),
        Route("/v1/completions", handlers.completions, methods=["POST"]),
        Route("/v1/responses", handlers.responses, methods=["POST"]),
        Route("/v1/models", handlers.models, methods=["GET"]),
        Route("/health", handlers.health, methods=["GET"]),
        Route("/metrics", handlers.metrics, methods=["GET"]),
    ]
    tracer = tracing.active
    app = Starlette(
        routes=routes,
        middleware=[] if tracer is None else [Middleware(tracer.asgi)],
        lifespan=lifespan,
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _unexpected},
    )
    app.state.service = handlers.service
    return app
