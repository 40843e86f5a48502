"""A reasoning model's thinking and answer: split by delimiters or by the server, and counted apart."""

from __future__ import annotations

import json

import pytest

from paragen import Capabilities, Orchestrator, Problem, build_strategy, generate
from paragen._live import LiveSample, continuation
from paragen.backends.openai_config import OpenAIConfig
from paragen.backends.openai_wire import ChunkParser, WireOptions, build_body
from paragen.backends.scripted import Script, ScriptedBackend
from paragen.errors import ConfigError
from paragen.reasoning import StreamSplit, ThinkFormat, join_thinking, split_thinking
from paragen.types import ChatMessage, Delta, GenerateRequest, StrategyResult, Trace, Usage

pytestmark = pytest.mark.anyio
PROBLEM = Problem(question="What is 6*7?")


@pytest.mark.parametrize(
    ("fmt", "text", "reasoning", "answer", "state"),
    [
        (
            "think",
            "<think>so 41?</think>\n\nIt is \\boxed{42}.",
            "so 41?",
            "\n\nIt is \\boxed{42}.",
            "closed",
        ),
        ("think", "\n<think>so \\boxed{41}", "so \\boxed{41}", "", "open"),
        ("think", "It is \\boxed{42}.", "", "It is \\boxed{42}.", "none"),
        ("think", "so 41?</think>It is 42", "so 41?", "It is 42", "closed"),  # opened by the template
        ("think_open", "so \\boxed{41}", "so \\boxed{41}", "", "open"),
        ("think_open", "so 41?</think>It is 42", "so 41?", "It is 42", "closed"),
        ("none", "<think>so 41?</think>42", "", "<think>so 41?</think>42", "none"),
        (
            "gpt_oss",
            "<|channel|>analysis<|message|>6*7<|end|><|start|>assistant<|channel|>final<|message|>42<|return|>",
            "6*7",
            "42",
            "closed",
        ),
        ("gpt_oss", "<|channel|>analysis<|message|>6*7 is", "6*7 is", "", "open"),
    ],
)
def test_split_by_the_familys_delimiters(
    fmt: str, text: str, reasoning: str, answer: str, state: str
) -> None:
    split = split_thinking(text, fmt)  # type: ignore[arg-type]
    assert (split.reasoning, split.answer, split.state) == (reasoning, answer, state)


def test_join_writes_the_raw_text_a_continuation_prefills() -> None:
    assert join_thinking("so 41?", "42", "closed", "think") == "<think>so 41?</think>42"
    assert join_thinking("so 41?", "", "open", "think_open") == "<think>so 41?"
    assert join_thinking("", "42", "none", "think") == "42"


async def _single(scripts: list[Script], caps: Capabilities | None = None) -> StrategyResult:
    backend = ScriptedBackend(scripts, capabilities=caps)
    return await Orchestrator(backend).run(build_strategy("single"), PROBLEM)


async def test_in_text_thinking_is_split_and_its_tokens_counted_per_piece() -> None:
    # Word tokens: "<think>", " 41?", " \\boxed{41}", " no</think>" think (4); three more answer.
    result = await _single([Script(text="<think> 41? \\boxed{41} no</think> It is \\boxed{42}")])
    trace = result.traces[0]
    assert (trace.reasoning, trace.text, trace.thinking) == (
        " 41? \\boxed{41} no",
        " It is \\boxed{42}",
        "closed",
    )
    assert result.answer == "42"  # the box written while thinking is not the answer
    assert (trace.completion_tokens, trace.reasoning_tokens, trace.answer_tokens) == (7, 4, 3)
    assert trace.reasoning_count_source == "tokenizer"  # the scripted backend counts exactly
    assert (result.usage.reasoning_tokens, result.usage.answer_tokens) == (4, 3)
    assert result.reasoning == " 41? \\boxed{41} no"


async def test_a_sample_cut_off_while_thinking_has_no_answer_even_with_a_box() -> None:
    script = Script(text="<think> maybe \\boxed{41} or more", finish_reason="length")
    result = await _single([script])
    trace = result.traces[0]
    assert (trace.thinking, trace.text, trace.answer) == ("open", "", None)
    assert trace.reasoning == " maybe \\boxed{41} or more"
    assert result.answer is None
    assert (trace.reasoning_tokens, trace.answer_tokens) == (5, 0)
    assert (result.usage.num_open_thinking, result.usage.reasoning_tokens, result.usage.answer_tokens) == (
        1,
        5,
        0,
    )


async def test_whole_text_format_keeps_the_box_written_while_thinking() -> None:
    caps = Capabilities(thinking="none", continue_final=True)
    result = await _single([Script(text="<think> maybe \\boxed{41} or more", finish_reason="length")], caps)
    assert result.answer == "41"  # today's whole-text extraction, on request
    assert (result.traces[0].thinking, result.traces[0].reasoning_tokens) == ("none", 0)


async def test_thinking_sent_apart_by_the_server_is_kept_apart() -> None:
    script = Script(reasoning="6 times 7, \\boxed{41}? no", text="It is \\boxed{42}")
    result = await _single([script])
    trace = result.traces[0]
    assert (trace.reasoning, trace.text, trace.thinking) == (
        "6 times 7, \\boxed{41}? no",
        "It is \\boxed{42}",
        "closed",
    )
    assert (result.answer, trace.reasoning_tokens, trace.answer_tokens) == ("42", 5, 3)


async def test_a_server_split_sample_that_never_answers_is_all_thinking() -> None:
    result = await _single([Script(reasoning="6 times 7 is \\boxed{42}", text="")])
    trace = result.traces[0]
    assert (trace.thinking, trace.text, result.answer) == ("open", "", None)
    assert trace.reasoning_tokens == trace.completion_tokens == 5


async def test_the_scripted_server_ends_thinking_at_the_requests_budget() -> None:
    backend = ScriptedBackend([Script(reasoning="a b c d e f", text="done")])
    request = GenerateRequest(prompt="q", thinking_budget=2)
    [completion] = await generate(backend, request)
    assert (completion.reasoning, completion.text, completion.num_tokens) == ("a b", "done", 3)


def test_server_reported_reasoning_tokens_win_over_the_per_piece_count() -> None:
    live = LiveSample(Trace(id=0))
    live.add(Delta(0, "", 3, reasoning="thinking"), 0.0)
    live.add(Delta(0, "42", 1, finish_reason="stop"), 0.1)
    usage = Usage(prompt_tokens=5, completion_tokens=6, source="server", reasoning_tokens=5)
    live.apply_usage(usage)
    trace = live.finish(0.2)
    assert (trace.reasoning_tokens, trace.reasoning_count_source, trace.answer_tokens) == (5, "server", 1)
    shared = LiveSample(Trace(id=1), index=1)  # a choice of an n > 1 request: the usage is not its own
    shared.add(Delta(1, "", 2, reasoning="hm"), 0.0)
    shared.add(Delta(1, "7", 1, finish_reason="stop"), 0.1)
    shared.apply_usage(usage, choices=2)
    assert shared.finish(0.2).reasoning_tokens == 2


def test_a_server_count_of_no_thinking_does_not_hide_thinking_that_streamed() -> None:
    live = LiveSample(Trace(id=0))  # vLLM's olmo3 parser streams thinking and reports 0 of it
    live.add(Delta(0, "", 4, reasoning="all of it thought"), 0.0)
    live.add(Delta(0, "", 0, finish_reason="length"), 0.1)
    live.apply_usage(Usage(prompt_tokens=5, completion_tokens=4, source="server", reasoning_tokens=0))
    trace = live.finish(0.2)
    assert (trace.thinking, trace.reasoning_tokens, trace.reasoning_count_source) == ("open", 4, "server")


def test_a_server_total_does_not_make_a_per_piece_thinking_count_the_servers() -> None:
    # llama-server: pieces counted one each, then a total with no reasoning count in it.
    usage = Usage(prompt_tokens=5, completion_tokens=8, source="server", piece_source="estimate")
    closed = LiveSample(Trace(id=0))
    closed.add(Delta(0, "", 1, reasoning="The"), 0.0)
    closed.add(Delta(0, "", 1, reasoning=" capital"), 0.0)
    closed.add(Delta(0, "Paris", 1, finish_reason="stop"), 0.1)
    closed.apply_usage(usage)  # the tokens of </think> and EOS came as no piece
    trace = closed.finish(0.2)
    assert (trace.completion_tokens, trace.count_source) == (8, "server")
    assert (trace.reasoning_tokens, trace.reasoning_count_source, trace.answer_tokens) == (2, "estimate", 6)
    still = LiveSample(Trace(id=1))  # still thinking at its end: every token of the total thought
    still.add(Delta(0, "", 1, reasoning="The capital"), 0.0)
    still.add(Delta(0, "", 0, finish_reason="length"), 0.1)
    still.apply_usage(usage)
    trace = still.finish(0.2)
    assert (trace.thinking, trace.reasoning_tokens, trace.reasoning_count_source) == ("open", 8, "server")


def _chunk(**delta: str) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def test_wire_reads_both_reasoning_fields_and_the_reasoning_token_count() -> None:
    usage = Usage()
    parser = ChunkParser("chat", usage)
    deltas = [
        *parser.parse(_chunk(role="assistant", content="")),
        *parser.parse(_chunk(reasoning="Six sevens")),  # vLLM since late 2025
        *parser.parse(_chunk(reasoning_content=" make 42.")),  # older vLLM, SGLang, llama.cpp, DeepSeek
        *parser.parse(_chunk(content="42")),
    ]
    final = {
        "choices": [],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 7,
            "completion_tokens_details": {"reasoning_tokens": 6},
        },
    }
    parser.parse(json.dumps(final))
    assert [(d.reasoning, d.text) for d in deltas] == [("Six sevens", ""), (" make 42.", ""), ("", "42")]
    assert (usage.completion_tokens, usage.reasoning_tokens, usage.source) == (7, 6, "server")
    assert usage.piece_source == "estimate"  # how the pieces were counted before the server's total


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("vllm", "thinking_token_budget"),
        ("sglang", "thinking_budget"),
        ("llama_cpp", "thinking_budget_tokens"),
    ],
)
def test_thinking_budget_goes_in_the_servers_own_field(kind: str, field: str) -> None:
    request = GenerateRequest(prompt="q")
    options = WireOptions("m", "chat", kind=kind, thinking_budget=64)  # type: ignore[arg-type]
    assert build_body(request, options)[field] == 64  # the backend's default
    assert build_body(request.model_copy(update={"thinking_budget": 8}), options)[field] == 8
    body = build_body(request, WireOptions("m", "chat", kind="openai", thinking_budget=64))
    assert not {"thinking_token_budget", "thinking_budget", "thinking_budget_tokens"} & set(body)


def test_a_thinking_budget_is_refused_against_a_server_without_one() -> None:
    config = OpenAIConfig.model_validate({"base_url": "http://127.0.0.1:9/v1", "thinking_budgets": True})
    for kind in ("vllm", "sglang", "llama_cpp"):
        config.check_knobs(kind, "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="takes no thinking budget"):
        config.check_knobs("openai", "https://api.openai.com/v1")
    assert OpenAIConfig.model_validate(
        {"base_url": "http://127.0.0.1:9/v1", "thinking_token_budget": 0}
    ).enforces_thinking_budgets


@pytest.mark.parametrize(
    ("prefill", "chat"),
    [("Q: 6*7?\n<think>\n", False), ("<think>\n", True), ("Q: 6*7? Answer:", False)],
)
def test_a_continuation_writes_the_thought_once_after_its_prefill(prefill: str, chat: bool) -> None:
    """Thinking the server sent apart is written back in its delimiters; where the prompt or the
    continued reply opened the thought, the opener is not written twice."""
    live = LiveSample(Trace(id=0), think_format="think_open" if "<think>" in prefill else "think")
    if chat:
        messages = (ChatMessage(role="user", content="6*7?"), ChatMessage(role="assistant", content=prefill))
        live.request = GenerateRequest(messages=messages, continue_final=True)
    else:
        live.request = GenerateRequest(prompt=prefill)
    live.add(Delta(index=0, text="", num_tokens=2, reasoning="six sevens"), 0.0)
    request = continuation(live, " so", max_tokens=4)
    written = request.prompt if not chat else request.messages[-1].content  # type: ignore[index]
    opener = "" if "<think>" in prefill else "<think>"
    assert written == prefill + opener + "six sevens so"


STREAMED = [
    "<think>6 times 7</think>The answer is 42.",
    "  <think>\nhm, 6 sevens\n</think>\n\n42",
    "<think>still thinking when cut off",
    "<thi",
    "The answer is 42.",
    "",
    "<think></think>42",
    "a < b </ think > c",
]


@pytest.mark.parametrize("fmt", ["think", "think_open"])
@pytest.mark.parametrize("text", STREAMED)
def test_a_streamed_split_joins_to_the_whole_texts_split(fmt: ThinkFormat, text: str) -> None:
    """Every way of cutting the text into pieces (a piece a character up to the whole) streams
    the parts the whole text splits into."""
    whole = split_thinking(text, fmt)
    for size in range(1, max(len(text), 1) + 1):
        stream = StreamSplit(fmt)
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        parts = [stream.feed(piece, last=i == len(pieces) - 1) for i, piece in enumerate(pieces)]
        thought, answer = "".join(p[0] for p in parts), "".join(p[1] for p in parts)
        assert (thought, answer) == (whole.reasoning, whole.answer), size


def test_a_think_output_that_closes_an_unopened_thought_streams_as_answer() -> None:
    """The one case the stream cannot know in time: the family writes its own opener."""
    stream = StreamSplit("think")
    assert stream.feed("hm</think>42", last=True) == ("", "hm</think>42")
    assert split_thinking("hm</think>42", "think").reasoning == "hm"


def test_an_unknown_format_is_a_config_error_naming_the_known_ones() -> None:
    """A misspelt family (DeepSeek-R1's is "think_open") must not read every output as no thinking."""
    for call in (
        lambda: split_thinking("<think>a</think>b", "deepseek"),  # type: ignore[arg-type]
        lambda: join_thinking("a", "b", "closed", "deepseek"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigError, match="unknown thinking format 'deepseek'") as info:
            call()
        assert "think, think_open, gpt_oss, none" in str(info.value)
    assert split_thinking("<think>a</think>b", "none").answer == "<think>a</think>b"  # "none" is known
