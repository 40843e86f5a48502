"""HTTP-level helpers of the OpenAI-compatible backend: error mapping and retry timing.

Every httpx failure becomes one of paragen's BackendErrors at this boundary, with the
httpx exception kept as ``__cause__`` (the pattern of httpx's own
``map_httpcore_exceptions``), so callers never need to import httpx to handle errors.
"""

from __future__ import annotations

import email.utils
import random
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
        raise BackendConnectionError(f"{url}: connection failed: {exc or type(exc).__name__}") from exc
    except httpx.HTTPError as exc:
        raise BackendProtocolError(f"{url}: HTTP failure: {exc or type(exc).__name__}") from exc


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
    message = f"{where}: HTTP {status}: {error_message(response.content)}"
    hint = _hint(status)
    raise BackendHTTPError(message, status_code=status, retry_after=retry_after(response), hint=hint)


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
