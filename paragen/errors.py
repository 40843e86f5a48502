"""The one exception tree of paragen.

Everything paragen raises on purpose derives from :class:`ParagenError`; errors of
the libraries underneath (httpx, torch, pydantic, ...) are caught at the boundary
and re-raised as one of these with the original kept as ``__cause__``::

    ParagenError
    ├── ConfigError                 bad configuration or input (CLI exit code 2)
    │   ├── PluginNotFoundError     nothing registered under that name, or a module:attr not importable
    │   └── PluginBrokenError       a plugin's entry point does not load (missing attribute, error at import)
    ├── BudgetExceededError         a token or time budget ran out
    └── BackendError                a backend failed to produce a completion
        ├── BackendTimeoutError     connect/read timeout, or a deadline inside the backend
        ├── BackendConnectionError  could not reach the server (refused, DNS, reset before any byte)
        ├── BackendHTTPError        the server answered with an error status (``status_code``)
        │   └── BackendAuthError    401/403: wrong or missing API key
        ├── BackendProtocolError    the server's answer was not what the protocol says (malformed chunk)
        └── EngineError             the in-process engine refused or failed a request (e.g. cannot fit)

Cancellation is not an error: it propagates as the async library's cancellation.

A run records a spent budget, a passed deadline and a backend failure in its result, also when
they reach it wrapped in exception groups; anything else is a bug and propagates as itself
(:mod:`paragen._outcome` decides, once, for the orchestrator).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import ValidationError

T = TypeVar("T")


class ParagenError(Exception):
    """Base class of every error paragen raises on purpose."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} ({hint})")

    def one_line(self) -> str:
        """The error as one line for a terminal: what is wrong and, when known, what to do."""
        text = str(self).replace("\n", " ")
        return f"{type(self).__name__}: {text}"


class ConfigError(ParagenError, ValueError):
    """Configuration or input that cannot be used as given."""


class PluginNotFoundError(ConfigError, LookupError):
    """No plugin is registered under the requested name."""

    def __init__(
        self,
        kind: str,
        name: str,
        available: Iterable[str],
        *,
        reason: str | None = None,
        takes_spec: bool = False,
    ) -> None:
        self.kind = kind
        self.name = name
        self.available = sorted(available)
        listing = ", ".join(self.available) or "none installed"
        found = f"unknown {kind} {name!r}" + (f": {reason}" if reason else "")
        spec = " or a 'package.module:attribute'" if takes_spec else ""
        super().__init__(found, hint=f"available: {listing}{spec}")


class PluginBrokenError(ConfigError):
    """A plugin is registered, but its entry point fails to load."""

    def __init__(self, kind: str, name: str, target: str, cause: BaseException) -> None:
        self.kind = kind
        self.name = name
        super().__init__(
            f"{kind} {name!r} is broken: {target} does not load ({type(cause).__name__}: {cause})",
            hint="fix or uninstall the package that registers it",
        )


class BudgetExceededError(ParagenError):
    """A token or time budget of the run was used up."""

    def __init__(self, message: str, *, kind: str) -> None:
        self.kind = kind
        super().__init__(message)


class BackendError(ParagenError):
    """A backend could not produce a completion."""

    retryable: bool = False


class BackendTimeoutError(BackendError):
    """The backend did not answer in time."""

    retryable = True


class BackendConnectionError(BackendError):
    """The server could not be reached or dropped the connection."""

    retryable = True


class BackendHTTPError(BackendError):
    """The server answered with an HTTP error status."""

    def __init__(
        self, message: str, *, status_code: int, retry_after: float | None = None, hint: str | None = None
    ) -> None:
        self.status_code = status_code
        self.retry_after = retry_after
        super().__init__(message, hint=hint)

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        return self.status_code == 429 or self.status_code >= 500


class BackendAuthError(BackendHTTPError):
    """The server refused the credentials (HTTP 401/403)."""


class BackendProtocolError(BackendError):
    """The server's answer broke the protocol (a malformed stream chunk, a missing field)."""


class EngineError(BackendError):
    """The in-process engine refused or failed a request."""


@dataclass(frozen=True, slots=True)
class InvalidField:
    """One problem pydantic found: the field's dotted path ("" for the value as a whole), the message
    (without the "Value error, " pydantic puts before a validator's own) and pydantic's error type."""

    field: str
    message: str
    type: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


def invalid_fields(exc: ValidationError) -> list[InvalidField]:
    """Every problem of ``exc``, in pydantic's order."""
    return [
        InvalidField(
            field=".".join(str(part) for part in err["loc"]),
            message=str(err["msg"]).removeprefix("Value error, "),
            type=err["type"],
        )
        for err in exc.errors()
    ]


def describe_invalid(exc: ValidationError, *, every: bool = False, whole: str = "") -> str:
    """The first problem of ``exc`` as ``field: message`` (with ``every``, all of them, ``; ``-joined);
    ``whole`` names the field of a problem of the value as a whole."""
    found = invalid_fields(exc)
    named = [InvalidField(p.field or whole, p.message, p.type) for p in found[: None if every else 1]]
    return "; ".join(str(p) for p in named)


def build_config(
    model: Callable[..., T], options: Mapping[str, Any], *, what: str, hint: str | None = None
) -> T:
    """``model(**options)``, or one ConfigError naming every bad option: ``bad {what}: FIELD: WHY; ...``."""
    from pydantic import ValidationError

    try:
        return model(**options)
    except ValidationError as exc:
        raise ConfigError(f"bad {what}: {describe_invalid(exc, every=True)}", hint=hint) from exc
