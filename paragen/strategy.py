"""The Strategy protocol and a small base class.

A strategy is a name, a pydantic ``Config`` (unknown fields refused) and
``async run(problem, ctx) -> StrategyResult``. It decides; the context samples,
cancels and accounts. Plugins register a Strategy class under the entry-point
group "paragen.strategies"::

    [project.entry-points."paragen.strategies"]
    my_vote = "my_pkg.vote:MyVote"
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, ValidationError

from paragen._context import RunContext
from paragen.errors import ConfigError, describe_invalid
from paragen.types import Problem, StrategyResult


class StrategyConfig(BaseModel):
    """Base of strategy configs: unknown fields are refused, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


ConfigT = TypeVar("ConfigT", bound=StrategyConfig)


@runtime_checkable
class Strategy(Protocol):
    """What the orchestrator runs."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> StrategyConfig: ...

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult: ...


class BaseStrategy(Generic[ConfigT]):
    """Convenience base: ``Config`` class attribute, construction from a config or keyword overrides."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[StrategyConfig]] = StrategyConfig
    # The config field that ``-n`` sets (a sweep's n): samples for most strategies; Hogwild!'s workers.
    count_field: ClassVar[str | None] = "n"
    config: ConfigT

    def __init__(self, config: ConfigT | None = None, **overrides: Any) -> None:
        if config is not None and overrides:
            raise ConfigError(f"{self.name}: give a config or keyword overrides, not both")
        self.config = config if config is not None else self.make_config(overrides)  # type: ignore[assignment]

    @classmethod
    def make_config(cls, values: dict[str, Any]) -> StrategyConfig:
        """Validate ``values`` into this strategy's Config; a bad field gives one clear ConfigError."""
        try:
            return cls.Config.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(
                f"strategy {cls.name!r}: {describe_invalid(exc, whole='config')}",
                hint=_fields_hint(cls.Config),
            ) from exc


def _fields_hint(config: type[BaseModel]) -> str:
    return "fields: " + ", ".join(f"{name}" for name in config.model_fields)


def count_field(cls: Any) -> str | None:
    """The config field of strategy class ``cls`` that ``-n`` sets, or None when it has none.

    ``n`` unless the class names another in ``count_field`` (``hogwild``: ``workers``, so
    ``--n 2,4`` sweeps its workers). Plugins without the attribute get ``n`` if their Config has it.
    """
    fields = getattr(getattr(cls, "Config", None), "model_fields", None) or {}
    name = getattr(cls, "count_field", "n")
    return name if isinstance(name, str) and name in fields else None


def parallel_samples(strategy: Strategy) -> int:
    """How many samples ``strategy`` may have running at once (what ``paragen serve --max-samples`` counts).

    A Config says so itself with a ``parallel_samples()`` method where its count field alone does
    not tell (PDR: its widest round times a draft strategy's own; adaptive consistency: its batch);
    else it is the value of the strategy's count field (``n``; Hogwild!'s ``workers``); else 1.
    """
    config = strategy.config
    method = getattr(config, "parallel_samples", None)
    if callable(method):
        value = method()
    else:
        field = count_field(type(strategy))
        value = getattr(config, field, 1) if field is not None else 1
    return value if isinstance(value, int) and value > 0 else 1


def build_strategy(name: str, options: dict[str, Any] | None = None) -> Strategy:
    """Look ``name`` up in the registry and build it with ``options`` (validated)."""
    from paragen.registry import load_strategy

    cls = load_strategy(name)
    strategy = cls(**(options or {}))
    if not isinstance(strategy, Strategy):
        raise ConfigError(f"strategy {name!r} does not implement the Strategy protocol")
    return strategy
