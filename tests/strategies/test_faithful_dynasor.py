"""Dynasor-CoT decides as hao-ai-lab/Dynasor's client loop (dynasor/cot.py) does: the same probe
responses, through paragen's strategy run on the scripted backend and through the transcription
in reference_rules, stop the sample after the same probe with the same answer."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from math_verify import parse, verify
from reference_rules import dynasor_obtain_answer, dynasor_stop_index
from strategy_helpers import PROBLEM, SYNC, samples, words

from paragen.backends.scripted import Script, ScriptedBackend, tokenize
from paragen.orchestrator import Orchestrator
from paragen.types import GenerateRequest, SamplingParams, StrategyResult
from strategies.dynasor import PROBE_TEXT, Dynasor, boxed_prefix

INTERVAL = 4
LONG = words(40, "5")


def math_equal(a: str, b: str) -> bool:
    """The reference groups answers with its math_equal; math-verify stands in for it here."""
    if a.strip() == b.strip():
        return True
    left, right = parse(f"${a}$", parsing_timeout=None), parse(f"${b}$", parsing_timeout=None)
    return bool(left and right and verify(left, right, timeout_seconds=None))


def probe_backend(responses: Sequence[str]) -> ScriptedBackend:
    """The sample writes LONG; its j-th probe (after (j + 1) * INTERVAL tokens) writes responses[j]."""

    def respond(request: GenerateRequest, index: int) -> Script:
        if not request.continue_final:
            return Script(text=LONG)
        content = request.messages[-1].content if request.messages else ""
        at = len(tokenize(content[: -len(PROBE_TEXT)]))
        j = at // INTERVAL - 1
        return Script(text=responses[j] if j < len(responses) else "wait}")  # past the list: no answer

    return ScriptedBackend(respond, capabilities=SYNC)


async def dynasor(responses: Sequence[str] | ScriptedBackend, **options: object) -> StrategyResult:
    backend = responses if isinstance(responses, ScriptedBackend) else probe_backend(responses)
    strategy = Dynasor(interval=INTERVAL, agree=3, **options)  # type: ignore[arg-type]
    orch = Orchestrator(backend, defaults=SamplingParams(max_tokens=64))
    return await orch.run(strategy, PROBLEM)


def stopped_after(result: StrategyResult) -> int | None:
    """After which probe (0-based) the sample was stopped as certain, or None."""
    (sample,) = samples(result)
    return sample.completion_tokens // INTERVAL - 1 if sample.cancel_reason == "certain" else None


async def assert_as_reference(responses: Sequence[str]) -> None:
    result = await dynasor(responses)
    expected = dynasor_stop_index(responses, 3, math_equal)
    assert stopped_after(result) == expected, responses
    if expected is not None:
        assert result.answer == dynasor_obtain_answer(responses[expected]).strip()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "responses",
    [
        ["12}", "12.0}", "12}"],  # one number, two spellings
        ["\\frac{1}{2}}", "0.5}", "1/2}"],  # a fraction, a decimal, a slash
        ["5}", "5}", "5"],  # the third probe was cut off before closing its box
        ["3} so \\boxed{4}", "3}", "3}"],  # a second box in the continuation is not the answer
        ["5}", "5}", "5} but", "5}", "5}"],  # "but" after the box hesitates all the same
        ["5} I know", "5}", "5}", "5}"],  # "no" inside "know" hesitates too, as a substring
        ["5} okay", "5} hold on", "5}", "5}", "5}"],
    ],
    ids=["spellings", "fraction", "cut-off", "second-box", "but", "no-in-know", "okay-hold"],
)
async def test_probe_answers_as_the_reference_reads_them(responses: list[str]) -> None:
    await assert_as_reference(responses + ["9}"] * (8 - len(responses)))


POOL = ["12}", "12.0}", " 12 }", "0.5}", "\\frac{1}{2}}", "1/2}", "12", "But 12}", "7}", "7.00}", "{7}}"]
POOL += ["3} \\boxed{4}", "Wait, 7}", "none}", "x^2} and", "}", "no answer"]


@pytest.mark.anyio
async def test_random_probe_sequences_stop_where_the_reference_stops() -> None:
    rng = random.Random(3)
    stops = 0
    for _ in range(40):
        responses = [rng.choice(POOL[:6] if rng.random() < 0.5 else POOL) for _ in range(8)]
        await assert_as_reference(responses)
        stops += dynasor_stop_index(responses, 3, math_equal) is not None
    assert 5 <= stops <= 35  # both outcomes are exercised


def test_the_answer_is_the_text_before_the_first_unmatched_brace() -> None:
    for text in ("12}", "\\frac{1}{2}} then", "3} so \\boxed{4}", "12", "}", "  7 } x", "{a}"):
        assert boxed_prefix(text) == (dynasor_obtain_answer(text).strip() or None)


@pytest.mark.anyio
async def test_probes_are_sampled_as_the_reference_samples_them() -> None:
    backend = probe_backend(["5}"] * 8)
    result = await dynasor(backend)
    probes = [t for t in result.traces if t.kind == "probe"]
    assert [p.meta["at"] for p in probes] == [4, 8, 12]  # paragen's schedule: the first after INTERVAL
    assert stopped_after(result) == 2 and result.answer == "5"
    sent = [s.request.params for s in backend.streams if s.request.continue_final]
    assert {(p.max_tokens, p.temperature, p.top_p) for p in sent} == {(20, 0.6, 0.95)}


@pytest.mark.anyio
async def test_greedy_probes_remain_an_option() -> None:
    backend = probe_backend(["5}"] * 8)
    result = await dynasor(backend, probe_temperature=0.0, probe_top_p=None)
    assert stopped_after(result) == 2
    sent = [s.request.params for s in backend.streams if s.request.continue_final]
    assert {(p.temperature, p.top_p) for p in sent} == {(0.0, 1.0)}  # greedy; top-p the run's default
