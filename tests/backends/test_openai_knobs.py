"""The servers' own knobs (request priority, vLLM's repetition detection) on every request's body,
and refused where the probed server kind would not take them (a fake server: the body's shape)."""

from __future__ import annotations

from typing import Any

import pytest
from openai_fakes import FakeServer

from paragen.backends.base import generate
from paragen.backends.openai import OpenAIBackend
from paragen.errors import ConfigError
from paragen.types import ChatMessage, GenerateRequest

pytestmark = pytest.mark.anyio

DETECTION = {"max_pattern_size": 8, "min_pattern_size": 2, "min_count": 4}


def make(server: FakeServer, **options: Any) -> OpenAIBackend:
    return OpenAIBackend.from_spec("http://fake/v1", transport=server.transport, api_key_env=None, **options)


async def test_vllm_gets_priority_and_repetition_detection_on_every_request(server: FakeServer) -> None:
    backend = make(server, priority=-5, repetition_detection=DETECTION)
    await generate(backend, GenerateRequest(prompt="x"))
    await generate(backend, GenerateRequest(messages=(ChatMessage(role="user", content="y"),)))
    assert len(server.bodies) == 2
    for body in server.bodies:
        assert body["priority"] == -5 and body["repetition_detection"] == DETECTION


async def test_sglang_gets_priority_and_no_knob_is_sent_unset(server: FakeServer) -> None:
    server.owned_by = "sglang"
    await generate(make(server, priority=3), GenerateRequest(prompt="x"))
    await generate(make(server), GenerateRequest(prompt="x"))
    first, plain = server.bodies
    assert first["priority"] == 3 and "repetition_detection" not in first
    assert "priority" not in plain and "repetition_detection" not in plain


@pytest.mark.parametrize(
    ("owned_by", "options", "says"),
    [
        ("sglang", {"repetition_detection": DETECTION}, "repetition_detection is vLLM's"),
        ("llamacpp", {"priority": 1}, "priority is taken by vLLM and SGLang"),
    ],
)
async def test_a_knob_the_server_does_not_take_fails_at_open(
    server: FakeServer, owned_by: str, options: dict[str, Any], says: str
) -> None:
    server.owned_by = owned_by
    with pytest.raises(ConfigError, match=says):
        await make(server, **options).open()
    assert server.bodies == []  # refused before any generation request


def test_bad_repetition_detection_is_one_config_error() -> None:
    with pytest.raises(ConfigError, match="min_pattern_size must not exceed max_pattern_size"):
        OpenAIBackend.from_spec("http://fake/v1", repetition_detection={**DETECTION, "min_pattern_size": 9})
    with pytest.raises(ConfigError, match="min_count"):
        OpenAIBackend.from_spec("http://fake/v1", repetition_detection={**DETECTION, "min_count": 1})
