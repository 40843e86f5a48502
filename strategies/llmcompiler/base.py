"""What LLMCompiler and its ReAct baseline share: a tool list in the config and a toolbox."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import Field

from paragen import BaseStrategy, StrategyConfig
from strategies.llmcompiler.tools import Tool, load_tools


class ToolConfig(StrategyConfig):
    tools: tuple[str, ...] = Field(default=("calculator", "python", "lookup"), description="tool names")
    tool_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description='e.g. {"lookup": {"root": ...}}'
    )
    tool_timeout_s: float = Field(default=60.0, gt=0)


ToolConfigT = TypeVar("ToolConfigT", bound=ToolConfig)


class ToolStrategy(BaseStrategy[ToolConfigT]):
    """A strategy that calls tools: given to the constructor (tests, notebooks) or loaded by name."""

    def __init__(
        self,
        config: ToolConfigT | None = None,
        *,
        toolbox: Mapping[str, Tool] | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(config, **overrides)
        self.toolbox = dict(toolbox) if toolbox is not None else None

    def resolve_tools(self) -> dict[str, Tool]:
        """The tools of this run: given to the constructor, else loaded by name from the config."""
        if self.toolbox is not None:
            return self.toolbox
        options = {k: v for k, v in self.config.tool_options.items() if k in self.config.tools}
        return load_tools(self.config.tools, options)
