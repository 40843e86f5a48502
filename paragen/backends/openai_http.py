"""HTTP-level helpers of the OpenAI-compatible backend: error mapping and retry timing.

Every httpx failure becomes one of paragen's BackendErrors at this boundary, with the
httpx exception kept as ``__cause__`` (the pattern of httpx's own
``map_httpcore_exceptions``), so callers never need to import httpx to handle errors.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from httpx_sse import SSEError

from paragen.backends.openai_wire import error_message
from paragen.errors import (
    BackendAuthError,
    BackendConnectionError,
    BackendError,
    BackendHTTPError,
    BackendProtocolError,
    BackendTimeoutError,
    ConfigError,
    ParagenError,
)

_KEY_HINT = "check the API key (option api_key, or the variable named by api_key_env)"


@contextmanager
def map_http_errors(url: str) -> Iterator[None]:
    """Re-raise httpx's transport errors as paragen's BackendErrors."""
    try:
        yield
    except SSEError as exc:  # a subclass of httpx.TransportError, so it goes first
        raise BackendProtocolError(f"{url}: not an event stream: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise BackendTimeoutError(f"{url}: timed out ({type(exc).__name__})") from exc
    except httpx.UnsupportedProtocol as exc:
        raise ConfigError(f"{url}: unsupported URL", hint="use an http:// or https:// base URL") from exc
    except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as exc:
        # RemoteProtocolError here is a connection cut mid-message (peer closed without finishing).
        raise BackendConnectionError(f"{url}: connection failed: {describe_cause(exc)}") from exc
    except httpx.HTTPError as exc:
        raise BackendProtocolError(f"{url}: HTTP failure: {describe_cause(exc)}") from exc


def describe_cause(exc: BaseException) -> str:
    """What went wrong, never blank: httpx raises a reset mid-stream as a ReadError without a message,
    so the exception's type stands in, with the error underneath (httpcore's, the socket's) where any."""
    text, named = str(exc), type(exc).__name__
    inner = exc.__cause__ or exc.__context__
    if text or inner is None:
        return text or named
    below = describe_cause(inner)
    return below if below.startswith(named) else f"{named} ({below})"


async def raise_for_status(response: httpx.Response) -> None:
    """Raise the matching BackendHTTPError for an error response (its body is read first)."""
    if response.is_success:
        return
    await response.aread()
    status = response.status_code
    where = str(response.request.url)
    if status in (401, 403):
        # The server's text is left out on purpose: some servers echo part of the key.
        raise BackendAuthError(
            f"{where}: HTTP {status}, credentials refused", status_code=status, hint=_KEY_HINT
        )
    message = redact(f"{where}: HTTP {status}: {error_message(response.content)}", response.request)
    hint = _hint(status)
    raise BackendHTTPError(message, status_code=status, retry_after=retry_after(response), hint=hint)


_USERINFO = re.compile(r"://[^/\s@]+@")


def secrets_of(request: httpx.Request) -> list[str]:
    """The credentials ``request`` carries (its Authorization header, whole and in parts)."""
    header = request.headers.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    found = [header, credential.strip()]
    if scheme.lower() == "basic":
        try:
            pair = base64.b64decode(credential, validate=True).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            pair = ""
        found += [pair, pair.partition(":")[2]]
    # Longest first, so a key is not left half-replaced by a shorter piece of itself.
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def redact(text: str, request: httpx.Request) -> str:
    """``text`` (a server's words) without the credentials ``request`` sent, nor any URL userinfo.

    Some servers and proxies echo the request's headers in an error body; that body goes
    into error messages, records and the terminal, so the key is cut out here, at the boundary.
    """
    for secret in secrets_of(request):
        text = text.replace(secret, "***")
    return _USERINFO.sub("://***@", text)


@contextmanager
def redacting(request: httpx.Request) -> Iterator[None]:
    """Errors raised inside (e.g. a server's error event in a stream) lose ``request``'s credentials."""
    try:
        yield
    except ParagenError as exc:
        exc.message = redact(exc.message, request)
        exc.hint = None if exc.hint is None else redact(exc.hint, request)
        exc.args = tuple(redact(a, request) if isinstance(a, str) else a for a in exc.args)
        raise


def _hint(status: int) -> str | None:
    if status == 404:
        return "check the model name and that the base URL ends with /v1"
    if status == 429:
        return "the server is rate limiting; lower the concurrency"
    return None


def retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked us to wait (``Retry-After`` as seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_delay(error: BackendError, attempt: int, backoff: float, max_delay: float) -> float | None:
    """How long to wait before retry number ``attempt`` (0-based), or None not to retry.

    Exponential backoff with full jitter, so a fleet of samples that failed together
    does not come back together; a server's Retry-After wins when it says more, and
    one beyond ``max_delay`` means giving up now rather than stalling the run.
    """
    if not error.retryable:
        return None
    delay = random.uniform(0, min(max_delay, backoff * 2**attempt))
    asked = getattr(error, "retry_after", None)
    if asked is not None:
        if asked > max_delay:
            return None
        delay = max(delay, asked)
    return delay
