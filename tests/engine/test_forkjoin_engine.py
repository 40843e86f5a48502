"""The fork/join executor on the real engine, with a tiny model trained to write ThreadWeaver's
grammar (tests/fork_weaver.py): its children start together from one prefill of their shared
prefix (the second child's prompt served from the first's cache), their texts are joined as the
grammar says, and the trunk goes on to the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fork_weaver import CHILDREN, PROBLEM, TRUNK, WOVEN

from paragen import Orchestrator
from paragen.backends.engine import EngineBackend
from paragen.prompts import solve_messages
from paragen.strategy import build_strategy
from paragen.types import ChatMessage, GenerateRequest, SamplingParams
from strategies._fork_grammar import THREADWEAVER

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def weaver(weaver_dir: Path) -> AsyncIterator[EngineBackend]:
    backend = EngineBackend.from_spec(str(weaver_dir), dtype="float32", block_size=4)
    yield backend
    await backend.aclose()


async def test_children_share_one_prefill_and_join_into_the_trunk(weaver: EngineBackend) -> None:
    free = weaver.engine.num_free_blocks
    defaults = SamplingParams(max_tokens=200, temperature=0.0, seed=0)
    result = await Orchestrator(weaver, defaults=defaults).run(build_strategy("forkjoin", {}), PROBLEM)

    assert result.stop_reason == "done", result.error
    assert (result.answer, result.text) == ("53", WOVEN)
    assert (result.metrics["forks"], result.metrics["children"]) == (1, 2)
    assert weaver.engine.num_free_blocks == free
    assert [t.label for t in result.traces] == ["trunk", "child", "child", "trunk"]
    trunk, first, second, after = result.traces
    assert [first.text, second.text] == list(CHILDREN.values())
    # One prefill for the children: the second starts from the first's cache where their prompts
    # agree (all but the thread's own label and what follows it); only its own tail is computed.
    ids = [weaver.prompt_ids(_child_request(label)) for label in CHILDREN]
    shared = next(i for i, (a, b) in enumerate(zip(*ids, strict=False)) if a != b)
    assert len(ids[1]) - 8 < shared < len(ids[1])
    assert not first.cached_prompt_tokens
    assert second.cached_prompt_tokens == shared
    assert first.end is not None and second.start < first.end  # side by side
    critical = trunk.completion_tokens + max(first.completion_tokens, second.completion_tokens)
    assert result.metrics["critical_path_tokens"] == critical + after.completion_tokens


def _child_request(label: str) -> GenerateRequest:
    reply = ChatMessage(role="assistant", content=TRUNK + THREADWEAVER.child_start(label))
    return GenerateRequest(
        messages=(*solve_messages(PROBLEM.question), reply), continue_final=True, params=SamplingParams()
    )
