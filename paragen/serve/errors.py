"""OpenAI-style error answers: ``{"error": {"message", "type", "param", "code"}}`` with a 4xx status.

Every way a request can be wrong ends here as an :class:`APIError`; a bug ends as a
500 whose body says only that (the traceback goes to the server log, never the body).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from paragen.errors import ParagenError, PluginNotFoundError, invalid_fields


class APIError(Exception):
    """An error answer: status, OpenAI error type, the offending parameter and a short code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_validation(exc: ValidationError) -> APIError:
    """The first problem pydantic found, as a 400 naming the parameter."""
    first = invalid_fields(exc)[0]
    param = first.field
    if first.type == "extra_forbidden":
        return bad_request(f"unrecognized request argument: {param}", param=param, code="unknown_parameter")
    return bad_request(f"{param}: {first.message}" if param else first.message, param=param or None)


def from_paragen(exc: ParagenError, *, param: str | None = None) -> APIError:
    """A ConfigError of the core (bad strategy config, unknown name) as a 400."""
    code = "unknown_strategy" if isinstance(exc, PluginNotFoundError) else "invalid_config"
    return bad_request(str(exc).replace("\n", " "), param=param, code=code)


def rate_limited(message: str, retry_after_s: int) -> APIError:
    return APIError(
        429,
        message,
        type="rate_limit_error",
        code="rate_limit_exceeded",
        headers={"Retry-After": str(retry_after_s)},
    )


def strategy_failed(strategy: str | None, exc: BaseException) -> APIError:
    """A 500 for a run whose strategy raised: the error's type and first line, no traceback."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # a task group's: its first error
        exc = exc.exceptions[0]
    detail = (str(exc).strip().splitlines() or [""])[0][:200]
    what = f"the strategy {strategy!r}" if strategy else "the pass-through run"
    message = f"{what} failed: {type(exc).__name__}{': ' + detail if detail else ''} (see the server log)"
    return APIError(500, message, type="server_error", code="strategy_error")


def internal_error() -> APIError:
    return APIError(500, "internal server error (see the server log)", type="server_error")
