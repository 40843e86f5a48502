"""hogwild's ``reference`` protocol against a transcription of the authors' rules (eqimp/hogwild_llm).

Each rule is compared on its own (pure functions), then whole runs on the scripted shared-cache
backend are replayed through the transcribed pass loop (``reference_rules_hogwild.generate``) and
must nudge, stop, answer, lay out the views and hand the finisher the same text.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import reference_rules_hogwild as ref

from paragen.backends.scripted_shared import ScriptedSharedBackend, ScriptedSharedSession, script_responder
from paragen.backends.scripted_shared import tokenize as scripted_tokenize
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, Problem, SamplingParams, StrategyResult
from strategies._finisher import FINISHER_TEXT
from strategies._hogwild_prompts import NAMES, finisher_answer
from strategies._hogwild_reference import REFERENCE_PROMPTS
from strategies._hogwild_rules import PARAGEN_STEPS, REFERENCE_STEPS, answer_in, ends_step, numeric_boxed
from strategies.hogwild import Hogwild

PROBLEM = Problem(id="p", question="What is 2 + 3?", gold="5")
# The reference's live layout strings (MathFormatting.current_step_header, current_worker_header).
OTHERS_HEADER = "\n\n### Work in progress (others)\n\n"
OWN_HEADER = "<...>\n\n### Work in progress (own)\n\n"

STEP_CASES: list[list[str]] = [
    ["It is 5", ".", "\n\n"],
    ["It is 5", ".\n\n"],  # one token holding the sentence end and the blank line
    ["It is 5.", "\n\nThe"],  # the blank line and the next word in one token
    ["It is 5.", "\n", "\n"],  # a blank line of two one-newline tokens
    ["Then:", "\n\n"],
    ["a.\n\nb", " c"],
    ["a.", "\n\n", "\n\n"],
    ["**Alice [2]:** ", "\n\n"],
    [" 3 ¶ ", "\n\n"],
    ["```python\nx = 1.", "\n\n"],  # inside an open code block
    ["```\nx = 1\n```\nDone.", "\n\n"],
    ["Why?", "\n\n"],
    *[[f"done{c}", "\n\n"] for c in ref.END_OF_STEP_CHARS],
]


@pytest.mark.parametrize("tokens", STEP_CASES, ids=repr)
def test_a_step_ends_where_the_reference_ends_it(tokens: list[str]) -> None:
    text = "".join(tokens)
    found = ends_step(text, len(tokens[-1]), REFERENCE_STEPS)
    assert (found is not None) == ref.is_end_of_step(tokens)
    if found is not None:  # the reference's finished step holds every token up to the newest
        assert text[:found] == text


def test_paragens_step_rule_differs_only_where_documented() -> None:
    differ = [
        t for t in STEP_CASES if (ends_step("".join(t), len(t[-1])) is not None) != ref.is_end_of_step(t)
    ]
    extra = [[f"done{c}", "\n\n"] for c in "॥།᠃։჻¶❧"]
    assert sorted(map(repr, differ)) == sorted(
        map(repr, [["It is 5.", "\n", "\n"], ["```python\nx = 1.", "\n\n"], [" 3 ¶ ", "\n\n"], *extra])
    )
    assert PARAGEN_STEPS.code_blocks and not REFERENCE_STEPS.code_blocks


ANSWER_CASES = [
    "so \\boxed{5}.",
    "\\boxed{\\frac{1}{2}}",
    "\\boxed{5} then \\boxed{x+1}",
    "\\boxed{1,000}",
    "\\boxed{ 2.5 }",
    "\\boxed{3",
    "\\boxed{7} and \\boxed{",
    "\\boxed{1e3}",
    "\\boxed{-4} or \\boxed{\\sqrt{2}}",
    "\\boxed{\\boxed{3}}",
    "\\boxed{}",
    "no box, 42",
    "\\boxed{12} \\boxed{\\dfrac{3}{4}} \\boxed{\\pi}",
]


@pytest.mark.parametrize("text", ANSWER_CASES)
def test_the_answer_is_the_last_box_that_is_a_number(text: str) -> None:
    found = numeric_boxed(text)
    expected = ref.final_answer(text)
    assert (None if found is None else float(found)) == expected
    assert answer_in(text, "number") == found


def test_paragens_answer_rule_takes_any_box() -> None:
    assert answer_in("\\boxed{\\frac{1}{2}}", "boxed") == "\\frac{1}{2}"
    assert answer_in("\\boxed{\\frac{1}{2}}", "number") is None
    assert finisher_answer("is \\boxed{", "x+1} so 4", "", "boxed") == "x+1"
    assert finisher_answer("is \\boxed{", "x+1} so 4", "earlier \\boxed{3}", "number") == "3"


# -- whole runs on the scripted shared-cache backend ------------------------------------------------


class _Finisher:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[GenerateRequest] = []

    def __call__(self, request: GenerateRequest, _index: int) -> str:
        self.requests.append(request)
        return self.reply


def _backend(scripts: list[str], finisher: _Finisher | None = None) -> ScriptedSharedBackend:
    return ScriptedSharedBackend(
        lambda: ScriptedSharedSession(script_responder(scripts), finisher="9}"), finisher
    )


async def _run(backend: Any, **options: Any) -> StrategyResult:
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64, temperature=0.7))
    return await orch.run(Hogwild(protocol="reference", **options), PROBLEM)


def _replay(scripts: list[str], every: int, passes: int) -> ref.State:
    samples = [scripted_tokenize(s) + [" more"] * passes for s in scripts]
    return ref.generate(
        samples,
        first_steps=[scripted_tokenize(REFERENCE_PROMPTS.opener(w)) for w in range(len(scripts))],
        step_prefix=lambda w, step: REFERENCE_PROMPTS.step_header.format(name=NAMES[w], step=step),
        nudge=REFERENCE_PROMPTS.nudge,
        tokenize=scripted_tokenize,
        every=every,
        max_steps=passes,
    )


def _nudged(result: StrategyResult) -> set[tuple[int, int]]:
    """(worker, step) of every header the nudge followed, read off the workers' text."""
    found = set()
    for worker, trace in enumerate(result.traces[:2]):
        for match in re.finditer(
            r"\*\*(\w+) \[(\d+)\]:\*\* " + re.escape(REFERENCE_PROMPTS.nudge), trace.text
        ):
            assert match.group(1) == NAMES[worker]
            found.add((worker, int(match.group(2))))
    return found


SCRIPTS = [
    "Go.\n\nx x x x Done.\n\ny y Ok.\n\nz z z z z Right.\n\nq q Fine.\n\nr r r",
    "Fine.\n\nw w w w w w w w w w Sure.\n\nv Yes.\n\nu u u u Good.\n\ns s s s s s",
]


@pytest.mark.anyio
@pytest.mark.parametrize("every", [1, 3, 6, 10, 14, 25])
async def test_the_nudge_falls_where_the_reference_puts_it(every: int) -> None:
    result = await _run(_backend(SCRIPTS), nudge_every=every, max_forward_passes=30)
    state = _replay(SCRIPTS, every, 30)
    assert _nudged(result) == {(w, step) for _, w, step in state.nudged}
    assert result.metrics["nudges"] == len(state.nudged)


@pytest.mark.anyio
async def test_a_fraction_does_not_stop_the_run_and_a_number_does() -> None:
    scripts = ["So \\boxed{\\frac{1}{2}}.\n\nI get \\boxed{7}.\n\nmore", "a b c d e f g h Sure.\n\nb b b b b"]
    result = await _run(_backend(scripts), max_forward_passes=30)
    state = _replay(scripts, 256, 30)
    assert state.finished and result.metrics["answered_at_pass"] == state.finished_at
    expected = ref.final_answer(ref.finisher_text(state, OTHERS_HEADER, "<...>"))
    assert result.answer is not None and float(result.answer) == expected == 7.0
    # paragen's rule stops at the fraction's step
    paragen = await _run(_backend(scripts), max_forward_passes=30, answer_rule="boxed")
    assert paragen.answer == "\\frac{1}{2}" and paragen.metrics["answered_at_pass"] < state.finished_at


@pytest.mark.anyio
async def test_the_answer_is_the_last_number_in_the_whole_text_once_the_run_stops() -> None:
    # Bob's finished step stops the run; Alice's unfinished step, later in the text, holds another box
    scripts = ["I think \\boxed{4} but let me check more and", "x \\boxed{6}.\n\nmore more"]
    result = await _run(_backend(scripts), max_forward_passes=30)
    state = _replay(scripts, 256, 30)
    assert state.finished
    assert result.answer is not None
    assert float(result.answer) == ref.final_answer(ref.finisher_text(state, OTHERS_HEADER, "<...>"))


@pytest.mark.anyio
@pytest.mark.parametrize("passes", [5, 6, 9, 12])
async def test_the_finisher_reads_the_references_text(passes: int) -> None:
    # passes=6 ends just after Alice's "Done." step closed: her next step's header is in its text
    finisher = _Finisher("8}")
    scripts = ["Go.\n\nx Done.\n\ny y y y y y y", "Fine.\n\nw w w w Sure.\n\nv v v v v"]
    result = await _run(_backend(scripts, finisher), max_forward_passes=passes, nudge_every=2)
    state = _replay(scripts, 2, passes)
    (request,) = finisher.requests
    assert request.messages is not None
    assert request.messages[-1].content == ref.finisher_text(state, OTHERS_HEADER, "<...>") + FINISHER_TEXT
    assert result.answer == "8"


@pytest.mark.anyio
async def test_the_view_is_the_references_cache() -> None:
    scripts = ["Go.\n\nx x Done.\n\ny y y y", "Fine.\n\nw w w Sure.\n\nv v v v v"]
    backend = _backend(scripts, _Finisher("1}"))
    await _run(backend, max_forward_passes=10, nudge_every=0)
    session = backend.sessions[0]
    prompt = session.apply_chat_template(REFERENCE_PROMPTS.messages(PROBLEM.question, 2))
    for passes in range(1, 11):
        history, own = _cache(scripts, passes - 1)
        for w in range(2):
            view = prompt + history + OTHERS_HEADER + own[1 - w] + OWN_HEADER + own[w]
            assert session.forwards[passes].views[w] == view
    assert "### Past steps" not in session.forwards[-1].views[0].removeprefix(prompt)


def _cache(scripts: list[str], done: int) -> tuple[str, list[str]]:
    """The reference's cache after ``done`` passes, with the next pass's inputs written: the common
    part after the prompt (every step folded in, without the token that ended it, which opens the
    worker's next step instead) and each worker's own part."""
    samples = [scripted_tokenize(s) for s in scripts]
    own = [scripted_tokenize(REFERENCE_PROMPTS.opener(w)) for w in range(2)]
    steps, history = [list(o) for o in own], ""
    numbers = [1, 1]
    for t in range(done):
        for w in range(2):
            token = samples[w][t]
            steps[w].append(token)
            fed = [token]
            if ref.is_end_of_step(steps[w]):
                numbers[w] += 1
                history += "".join(own[w])
                own[w] = []
                steps[w] = scripted_tokenize(
                    REFERENCE_PROMPTS.step_header.format(name=NAMES[w], step=numbers[w])
                )
                fed += steps[w]
            own[w] += fed
    return history, ["".join(o) for o in own]
