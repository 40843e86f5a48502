"""CISC, Confidence-Informed Self-Consistency (Taubenfeld et al.; arXiv 2502.06233, ACL Findings 2025).

n paths; each answered path gets a confidence; the vote weighs each path by softmax(c / T) over
the paths that have one, and the answer with the largest summed weight wins. The confidence is
one of the paper's three (prompts and parsing as the authors' code, google-research ``cisc/``):

- ``p_true``: one extra call per path continues the path, cut after its boxed answer, with
  "Now I will rate my confidence in the proposed answer as either 0 or 1. Proposed confidence: ("
  and reads P("1") from the one greedy token (see ``strategies._certainty.p_true``);
- ``verbal``: the same continuation asking for a 0-100 rating, greedy, 10 tokens, read up to ")";
- ``sequence_probability``: exp(mean log-probability of the path's tokens), no extra call.

The extra calls are traces of kind "score" (their tokens in ``score_tokens``, apart from the
samples'), started while other paths still run. T is tuned per model in the paper; the default
here is 0.2 for ``p_true`` (the value the authors' notebook takes from the paper), and the same
0.2 on the 0-1 scale for the others (0.2 for ``sequence_probability``, 20 for the 0-100 verbal).
docs/faithfulness.md lists what differs from the authors' code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from paragen import BaseStrategy, RunContext, StrategyConfig
from paragen.answers import ExtractMode
from paragen.errors import ConfigError
from paragen.types import GenerateRequest, Problem, StrategyResult, TokenCount, Trace
from strategies._certainty import cisc_vote, p_true, parse_verbal, sequence_probability
from strategies._toolkit import annotate, overrides, prefixed_request, solve_request, vote_finish

ConfidenceKind = Literal["p_true", "verbal", "sequence_probability"]

# The authors' prompts (cisc/src/confidence_extraction.py: BINARY and HUNDRED), appended to the path.
P_TRUE_PROMPT = (
    "\nNow I will rate my confidence in the proposed answer as either 0 or 1.\nProposed confidence: ("
)
VERBAL_PROMPT = (
    "\nNow I will rate my confidence in the proposed answer on a scale of 0-100.\nProposed confidence: ("
)
VERBAL_TOKENS = 10  # the reference's num_tokens: enough for "85)" and the like
DEFAULT_SOFTMAX_T: dict[ConfidenceKind, float] = {"p_true": 0.2, "sequence_probability": 0.2, "verbal": 20.0}


class CISCConfig(StrategyConfig):
    n: int = Field(default=8, ge=1, le=1024, description="paths to vote over")
    confidence: ConfidenceKind = "p_true"
    softmax_temperature: float | None = Field(
        default=None, gt=0, description="T of softmax(c / T); None = 0.2 on the confidence's 0-1 scale"
    )
    temperature: float | None = Field(default=None, ge=0, description="sampling temperature override")
    max_tokens: TokenCount | None = None
    extract: ExtractMode = "auto"

    def weight_temperature(self) -> float:
        return self.softmax_temperature or DEFAULT_SOFTMAX_T[self.confidence]


class CISC(BaseStrategy[CISCConfig]):
    """n paths, each weighted by softmax(confidence / T); the heaviest answer wins."""

    name = "cisc"
    Config = CISCConfig

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        cfg = self.config
        self._check(ctx)
        params = overrides(cfg.temperature, None, cfg.max_tokens)
        request = solve_request(
            ctx, problem.question, logprobs=cfg.confidence == "sequence_probability", **params
        )
        paths: list[Trace] = []
        confidences: list[float | None] = []
        async with ctx.concurrently() as children, ctx.fanout(request, n=cfg.n) as fan:
            async for trace in fan:
                if not annotate(trace, cfg.extract).is_ok:
                    continue
                paths.append(trace)
                confidences.append(None)
                children.start(self._rate, ctx, problem, trace, confidences, len(paths) - 1)
        _, voters, weights = cisc_vote([t.answer for t in paths], confidences, cfg.weight_temperature())
        metrics = {"voters": float(len(voters)), "softmax_temperature": cfg.weight_temperature()}
        return vote_finish(ctx, [paths[i] for i in voters], weights=weights, metrics=metrics)

    def _check(self, ctx: RunContext) -> None:
        caps, kind = ctx.capabilities, self.config.confidence
        if kind in ("p_true", "sequence_probability") and not caps.logprobs:
            raise ConfigError(
                f"cisc with confidence {kind!r} needs log-probabilities", hint="or confidence='verbal'"
            )
        if kind in ("p_true", "verbal"):
            ctx.require_continuation(
                f"cisc's {kind} confidence continues each path", instead="confidence='sequence_probability'"
            )

    async def _rate(
        self, ctx: RunContext, problem: Problem, trace: Trace, found: list[float | None], slot: int
    ) -> None:
        """The path's confidence into ``found[slot]`` (None: it takes no part in the vote)."""
        kind = self.config.confidence
        if trace.answer is None:  # the reference rates only paths with an answer
            return
        if kind == "sequence_probability":
            found[slot] = sequence_probability(trace.logprobs)
        else:
            found[slot] = await self._ask(ctx, problem, trace, kind)
        trace.meta["cisc_confidence"] = found[slot]

    async def _ask(
        self, ctx: RunContext, problem: Problem, trace: Trace, kind: ConfidenceKind
    ) -> float | None:
        ask = confidence_request(ctx, problem.question, trace.text, kind)
        async with ctx.fanout(ask, label=f"cisc_{kind}", kind="score", parents=[trace.id]) as fan:
            async for reply in fan:
                if kind == "verbal":  # an unreadable rating is 0, as the reference sets it
                    return parse_verbal(reply.text) if reply.is_ok else 0.0
                first = reply.logprobs[0] if reply.is_ok and reply.logprobs else None
                return p_true(reply.text, first)
        return None


def upto_answer(text: str) -> str:
    """The path cut after its last \\boxed{...}: the reference rates "only the part until the answer"."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return text
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[: i + 1]
    return text


def confidence_request(ctx: RunContext, question: str, path: str, kind: ConfidenceKind) -> GenerateRequest:
    """The path as a prefilled reply, the confidence prompt after it; greedy, as the reference asks."""
    prompt, tokens = (P_TRUE_PROMPT, 1) if kind == "p_true" else (VERBAL_PROMPT, VERBAL_TOKENS)
    return prefixed_request(
        ctx,
        question,
        upto_answer(path) + prompt,
        max_tokens=tokens,
        temperature=0.0,
        logprobs=kind == "p_true",
        stop=(),
    )


__all__ = ["CISC", "CISCConfig", "ConfidenceKind", "confidence_request", "upto_answer"]
