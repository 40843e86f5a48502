"""Tools: the plugin surface, the exact calculator, the local document lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from paragen.errors import ConfigError
from paragen.registry import TOOL_GROUP, register
from strategies.llmcompiler.tools import Tool, ToolInputError, load_tool, load_tools, tool
from strategies.llmcompiler.tools.calculator import evaluate
from strategies.llmcompiler.tools.lookup import DocStore, Document, load_store


class EchoArgs(BaseModel):
    text: str
    times: int = 1


@tool("echo", "echo(text, times=1) -> str")
async def echo(args: EchoArgs, *, sep: str = " ") -> str:
    return sep.join([args.text] * args.times)


@pytest.mark.anyio
async def test_decorated_tool_validates_positional_and_keyword_arguments() -> None:
    assert isinstance(echo, Tool) and echo.args_model is EchoArgs
    assert await echo(("hi", 2)) == "hi hi"
    assert await echo.bind(sep="-")(("hi",), {"times": 3}) == "hi-hi-hi"
    with pytest.raises(ToolInputError, match="times"):
        await echo(("hi", "many"))
    with pytest.raises(ToolInputError, match="at most 2"):
        await echo(("a", 1, 2))
    with pytest.raises(ConfigError, match="no option"):
        echo.bind(color="red")


def test_tools_load_by_name_from_the_registry_and_the_builtins() -> None:
    register(TOOL_GROUP, "echo_test", echo)
    assert load_tool("echo_test") is echo
    assert set(load_tools(["calculator", "python"])) == {"calculator", "python"}
    with pytest.raises(ConfigError, match="unknown tool"):
        load_tool("no_such_tool")
    with pytest.raises(ConfigError, match="not in use"):
        load_tools(["calculator"], {"lookup": {"root": "."}})


def test_a_tool_must_be_async_with_a_model_argument() -> None:
    with pytest.raises(ConfigError):
        tool("bad", "")(lambda x: x)


@pytest.mark.parametrize(
    ("expression", "value"),
    [("8/(3-8/3)", "24"), ("7/3", "7/3"), ("2^10", "1024"), ("1.5 * 4", "6"), ("max(3, 9) - min(2, 5)", "7")],
)
def test_calculator_is_exact(expression: str, value: str) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "().__class__", "open('x')", "9**9**9", "1/0", "lambda: 1", "x + 1"],
)
def test_calculator_refuses_code_and_absurd_work(expression: str) -> None:
    with pytest.raises(ToolInputError):
        evaluate(expression)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    (tmp_path / "everest.md").write_text("# Mount Everest\n\nEverest is 8849 metres high.\n\nMore text.")
    (tmp_path / "k2.txt").write_text("K2 is the second-highest mountain, 8611 metres high.")
    docs = [{"title": "Paris", "text": "Paris is the capital of France."}, {"title": "Rome", "text": "Rome."}]
    (tmp_path / "cities.json").write_text(json.dumps(docs))
    (tmp_path / "more.jsonl").write_text(json.dumps({"title": "Oslo", "text": "Oslo is in Norway."}) + "\n")
    return tmp_path


@pytest.mark.anyio
async def test_lookup_finds_the_best_document_and_its_opening_paragraph(store: Path) -> None:
    lookup = load_tool("lookup").bind(root=str(store))
    assert await lookup(("Mount Everest",)) == "Mount Everest: Everest is 8849 metres high."
    assert "8611" in await lookup(("k2 height",))
    assert (await lookup(("capital of France",))).startswith("Paris:")
    assert "Norway" in await lookup(("Oslo",))
    assert "No document" in await lookup(("zebra",))
    with pytest.raises(ToolInputError, match="no document store"):
        await load_tool("lookup")(("x",))


def test_bm25_prefers_rarer_terms_and_title_matches() -> None:
    docs = DocStore([Document("a", "the cat sat on the mat " * 3), Document("Cat facts", "a cat purrs")])
    assert docs.search("cat")[0].title == "Cat facts"
    with pytest.raises(ConfigError):
        load_store("/nonexistent/folder")


@pytest.mark.anyio
async def test_strategies_build_their_tools_from_config_names_and_options(store: Path) -> None:
    from paragen.registry import STRATEGY_GROUP
    from paragen.strategy import build_strategy
    from strategies.llmcompiler import LLMCompiler, ReAct

    register(STRATEGY_GROUP, "llmcompiler", LLMCompiler)
    register(STRATEGY_GROUP, "react", ReAct)
    options = {"tools": ["lookup", "calculator"], "tool_options": {"lookup": {"root": str(store)}}}
    for name in ("llmcompiler", "react"):
        strategy = build_strategy(name, options)
        tools = strategy.resolve_tools()  # type: ignore[attr-defined]
        assert set(tools) == {"lookup", "calculator"}
        assert "8849" in await tools["lookup"](("Everest",))
    with pytest.raises(ConfigError, match="max_replans"):
        build_strategy("llmcompiler", {"max_replans": 0})
