"""The openai backend's thinking options: one sub-config (``thinking``), also set by the flat
names the command line and docs use (``thinking=think_open``, ``thinking_budgets=true``, ...)."""

from __future__ import annotations

import pytest
from openai_fakes import FakeServer

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.backends.openai_config import OpenAIConfig, ThinkingOptions
from paragen.cli_options import parse_pairs, typed_options
from paragen.errors import ConfigError
from paragen.types import GenerateRequest

pytestmark = pytest.mark.anyio

URL = "http://fake/v1"


def from_cli(*items: str) -> OpenAIConfig:
    """The config that ``--backend-opt ITEM ...`` gives."""
    options = typed_options(parse_pairs(items, "--backend-opt"), OpenAIConfig)
    return OpenAIBackend.from_spec(URL, api_key_env=None, **options).config


def test_the_flat_names_and_the_sub_config_set_the_same_options() -> None:
    flat = from_cli(
        "thinking=think_open", "thinking_budgets=true", "thinking_token_budget=7", "raw_continuation=false"
    )
    grouped = from_cli(
        'thinking={"format": "think_open", "budgets": true, "token_budget": 7, "raw_continuation": false}'
    )
    expected = ThinkingOptions(format="think_open", budgets=True, token_budget=7, raw_continuation=False)
    assert flat.thinking == grouped.thinking == expected
    assert from_cli().thinking == ThinkingOptions()  # the defaults: <think> tags, no budgets
    assert from_cli("thinking=none", "thinking_budgets=true").thinking == ThinkingOptions(
        format="none", budgets=True
    )


def test_an_option_given_twice_or_a_bad_one_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="'budgets' is given twice"):
        from_cli('thinking={"budgets": true}', "thinking_budgets=false")
    with pytest.raises(ConfigError, match=r"thinking\.token_budget"):
        from_cli("thinking_token_budget=-1")
    with pytest.raises(ConfigError, match=r"thinking\.format"):
        from_cli("thinking=tags")


async def test_a_flat_budget_reaches_the_servers_field(server: FakeServer) -> None:
    backend = OpenAIBackend.from_spec(
        URL, transport=server.transport, api_key_env=None, thinking_token_budget=5
    )
    assert (await backend.open()).thinking_budget  # the fake says vLLM, which takes budgets
    await generate(backend, GenerateRequest(prompt="x"))
    assert server.bodies[0]["thinking_token_budget"] == 5


@pytest.mark.parametrize("option", [{"thinking_budgets": True}, {"thinking_token_budget": 5}])
async def test_budgets_asked_of_llama_cpp_python_are_refused(
    server: FakeServer, option: dict[str, object]
) -> None:
    """llama-cpp-python's server (owned_by "me", read as llama.cpp) takes no thinking budget: asked
    for one, the probe refuses in one line instead of leaving every thought unbounded."""
    server.owned_by = "me"
    backend = OpenAIBackend.from_spec(URL, transport=server.transport, api_key_env=None, **option)
    with pytest.raises(ConfigError, match="llama-cpp-python's server, which enforces no thinking budget"):
        await backend.open()
    assert not server.generation_requests()
    await backend.aclose()


async def test_llama_server_keeps_its_budgets(server: FakeServer) -> None:
    server.owned_by = "llamacpp"  # the C++ llama-server, which enforces them
    backend = OpenAIBackend.from_spec(
        URL, transport=server.transport, api_key_env=None, thinking_budgets=True
    )
    assert (await backend.open()).thinking_budget
    await backend.aclose()
