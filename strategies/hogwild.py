"""Hogwild! Inference (Rodionov et al., 2025): workers that write together over one shared KV cache.

n workers are n rows of one batch of the same model. Each forward pass gives every worker one
token, and every worker's view (an ordered list of cache segments) holds the others' text, so
a worker reads what the others write as they write it (the engine writes all rows' tokens before
any row reads). Text is cut into steps (a sentence end followed by a blank line); a finished step
joins the shared history: the engine copies it onto the history segment's end (keys re-rotated,
no forward pass). Workers may not end the sequence; the run ends when a finished step holds a
boxed answer, or when the budget of forward passes is spent, and then a short greedy finisher
asks for the answer.

Layouts (views built from segments; the engine is layout-agnostic):

- ``contiguous``: prompt, every other worker's steps in order, then the worker's own.
- ``interleaved``: prompt, the history of finished steps, then the worker's own current step
  (the others' unfinished steps are not visible: step-wise sync).
- ``combined`` (default): the history, then the others' unfinished steps, then its own.

``workers=1`` is plain decoding: ``single``'s prompt, one segment, no headers, the end-of-sequence
token allowed. Needs a backend with ``capabilities.shared_cache`` (the engine); for any other
backend use ``hogwild_text``, an approximation over ordinary requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from paragen import BaseStrategy, RunContext, RunSharedSession, SharedRow, StrategyConfig
from paragen.answers import extract_answer, last_boxed
from paragen.errors import ConfigError
from paragen.prompts import solve_messages
from paragen.types import ChatMessage, Problem, StrategyResult, TokenCount, Trace
from strategies._hogwild_prompts import NAMES, HogwildPrompts, ends_step, finisher_answer
from strategies._hogwild_reference import REFERENCE_PROMPTS

Layout = Literal["contiguous", "interleaved", "combined"]
ProtocolPreset = Literal["paragen", "reference"]

# What the ``reference`` protocol sets, unless the config sets a field itself.
_REFERENCE_DEFAULTS: dict[str, Any] = {
    "prompts": REFERENCE_PROMPTS,
    "nudge_unit": "tokens",
    "finisher_mode": "reencode",
    "answer_anywhere": True,
}

# Workers may not open markdown headers of their own: a "### Work in progress" written by a worker
# would read as the layout's (the reference suppresses "#" for the same reason).
_SUPPRESSED_TEXTS = ("</think>", "#", "##", "###", "####", " #", " ##", " ###")


class HogwildConfig(StrategyConfig):
    workers: int = Field(default=2, ge=1, le=len(NAMES), description="workers writing at once")
    layout: Layout = Field(default="combined", description="how each worker's view is built")
    protocol: ProtocolPreset = Field(
        default="paragen",
        description="preset: 'reference' follows the reference code (instructions and a worked example in "
        "the user turn, nudge over all workers' tokens, re-encoded finisher, answer anywhere)",
    )
    nudge_every: int = Field(
        default=256, ge=0, description="passes (or tokens) between collaboration nudges (0: never)"
    )
    nudge_unit: Literal["passes", "tokens"] = Field(
        default="passes", description="what nudge_every counts: forward passes, or every worker's tokens"
    )
    finisher_mode: Literal["view", "reencode"] = Field(
        default="view",
        description="'view': continue the last worker's view; 'reencode': the flattened text, fresh request",
    )
    answer_anywhere: bool = Field(
        default=False, description="at the budget's end, a boxed answer in any worker's text is the answer"
    )
    max_forward_passes: int | None = Field(
        default=None, gt=0, description="budget in sequential forward passes (None: the run's max_tokens)"
    )
    finisher_tokens: TokenCount = Field(default=16, description="greedy tokens the finisher may write")
    stop_at_answer: bool = Field(default=True, description="end once a finished step holds a boxed answer")
    temperature: float | None = Field(default=None, ge=0, description="override the run's temperature")
    prompts: HogwildPrompts = Field(default_factory=HogwildPrompts)

    @model_validator(mode="before")
    @classmethod
    def _apply_protocol(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("protocol") == "reference":
            return {**_REFERENCE_DEFAULTS, **data}
        return data


@dataclass(slots=True)
class _Worker:
    index: int
    segment: int  # the segment of the step it is writing
    pending: list[int]  # input of its next row: its last sample, then any header
    done: list[int] = field(default_factory=list)  # contiguous: one segment, all its finished steps
    step: int = 1
    step_start: int = 0  # where its current step begins in its text
    seen: int = 0  # characters of its text already checked for a step end


@dataclass(slots=True)
class _LayoutSegments:
    """The segments every worker's view holds: the prompt and the layout's headers."""

    prompt: int
    past: int = -1  # "### Past steps", then every finished step folded onto its end
    others: int = -1
    own: int = -1
    cuts: list[int] = field(default_factory=list)  # one " <...>" per other worker (distinct in a view)


class Hogwild(BaseStrategy[HogwildConfig]):
    """Workers that see each other's tokens as they are written (needs a shared-cache backend)."""

    name = "hogwild"
    Config = HogwildConfig
    count_field = "workers"  # -n sets the workers (a sweep's --n 2,4 compares team sizes)

    async def run(self, problem: Problem, ctx: RunContext) -> StrategyResult:
        if not ctx.capabilities.shared_cache:
            raise ConfigError(
                "hogwild needs a backend with a shared KV cache (capabilities.shared_cache)",
                hint="use the engine backend, or -s hogwild_text (an approximation) on this one",
            )
        cfg = self.config
        params: dict[str, Any] = {} if cfg.temperature is None else {"temperature": cfg.temperature}
        reencode: tuple[str, list[int]] | None = None
        async with ctx.shared_session(cfg.workers, names=NAMES[: cfg.workers], **params) as session:
            team = _Team(cfg, session, _pass_budget(cfg, ctx))
            if cfg.workers == 1:
                await team.plain(problem.question)
            else:
                await team.collaborate(problem.question)
            if team.answer is None and not team.eos and session.stop_reason is None:
                if cfg.answer_anywhere:
                    team.answer = last_boxed(team.flattened())
                if team.answer is None and cfg.finisher_mode == "view":
                    await team.finish()
                elif team.answer is None:  # after the session: the shared cache is freed first
                    reencode = team.flattened(), [t.id for t in session.traces]
        if reencode is not None:
            await team.finish_reencoded(ctx, self._messages(problem), *reencode)
        return ctx.finish(team.answer, text=team.transcript(), metrics=team.metrics())

    def _messages(self, problem: Problem) -> list[ChatMessage]:
        """The prompt the workers' text follows, as chat messages (the re-encoded finisher's prefix)."""
        if self.config.workers == 1:
            return solve_messages(problem.question)
        messages = self.config.prompts.messages(problem.question, self.config.workers)
        return [ChatMessage.model_validate(m) for m in messages]


def _pass_budget(cfg: HogwildConfig, ctx: RunContext) -> int:
    passes = cfg.max_forward_passes or ctx.defaults.max_tokens
    cap = ctx.budget.max_sequential_tokens
    return passes if cap is None else min(passes, cap)


class _Team:
    """One run's state: the segments, the workers, the history of finished steps."""

    def __init__(self, cfg: HogwildConfig, session: RunSharedSession, budget: int) -> None:
        self.cfg = cfg
        self.prompts = cfg.prompts
        self.io = session
        self.budget = budget
        self.team: list[_Worker] = []
        self.common = _LayoutSegments(prompt=-1)
        self.history_texts: list[str] = []
        self.since_nudge = 0
        self.nudges = 0
        self.answer: str | None = None
        self.answered_at: int | None = None
        self.finisher_text: str | None = None
        self.eos = False  # plain decoding ended with the end-of-sequence token
        # Room kept in every view for a step header, the finisher's prompt and its tokens (tokenized
        # once: has_room checks it every pass).
        self.reserve = 64 + len(session.tokenize(cfg.prompts.finisher)) + cfg.finisher_tokens

    # -- plain decoding (one worker) -------------------------------------------------------------

    async def plain(self, question: str) -> None:
        io = self.io
        messages = [m.model_dump() for m in solve_messages(question)]
        segment = await io.new_segment()
        self.common.prompt = segment
        prompt_ids = io.tokenize(io.apply_chat_template(messages))
        (sample,) = await io.prefill([SharedRow(0, [segment], prompt_ids)], first_token_for=0)
        worker = _Worker(0, segment, [sample.token_id])
        self.team = [worker]
        while True:
            self._finished_step(worker)
            self.eos = sample.token_id in io.eos_token_ids
            if self.answer is not None or self.eos or io.num_forward_passes >= self.budget:
                break
            row = SharedRow(0, [segment], worker.pending)
            if not io.has_room([row], self.reserve):
                break  # the model's context is full: as if the budget ran out
            (sample,) = await io.step([row])
            worker.pending = [sample.token_id]
        found = extract_answer(io.text(0))
        io.end("stop" if self.eos or self.answer else "length", answers=[found])
        if self.eos and self.answer is None:
            self.answer = found

    # -- collaboration (two or more workers) -----------------------------------------------------

    async def collaborate(self, question: str) -> None:
        io, count = self.io, self.cfg.workers
        own = await self._prefill_common(question)
        self.team = [_Worker(i, own[i], io.tokenize(self.prompts.opener(i))) for i in range(count)]
        suppress = self._suppressed()
        while io.num_forward_passes < self.budget and self.answer is None:
            rows = [SharedRow(w.index, self.view(w), w.pending) for w in self.team]
            if not io.has_room(rows, self.reserve):
                break  # the model's context is full: as if the budget ran out (the finisher answers)
            samples = await io.step(rows, suppress_token_ids=suppress)
            self.since_nudge += len(rows) if self.cfg.nudge_unit == "tokens" else 1
            for worker, sample in zip(self.team, samples, strict=True):
                worker.pending = [sample.token_id]
                if await self._after_token(worker) and self.answer is not None:
                    break
        answers = [last_boxed(io.text(w.index)) for w in self.team]
        io.end("stop" if self.answer is not None else "length", answers=answers)

    async def _prefill_common(self, question: str) -> list[int]:
        """The prompt and the layout's headers, written in one pass; returns the workers' segments.

        Every segment the run starts with comes from one call, and the headers are written beside
        the prompt they follow (rows write before any row reads): at a session's start each round
        trip to the engine could wait behind a pass of the other sessions.
        """
        io, prompts, common, count = self.io, self.prompts, self.common, self.cfg.workers
        texts = [prompts.past_header, prompts.others_header, prompts.own_header]
        texts += [prompts.cut_marker] * (count - 1)
        common.prompt, *segments = await io.new_segments(1 + len(texts) + count)
        headers, own = segments[: len(texts)], segments[len(texts) :]
        common.past, common.others, common.own, *common.cuts = headers
        messages = prompts.messages(question, count)
        rows = [SharedRow(0, [common.prompt], io.tokenize(io.apply_chat_template(messages)))]
        for header, text in zip(headers, texts, strict=True):
            rows.append(SharedRow(0, [common.prompt, header], io.tokenize(text)))
        await io.prefill(rows)
        return own

    def view(self, worker: _Worker) -> list[int]:
        """The worker's view: segment ids in order; its own current step last (written to)."""
        common, others = self.common, [w for w in self.team if w is not worker]
        layout = self.cfg.layout
        if layout == "interleaved":
            return [common.prompt, common.past, worker.segment]
        if layout == "contiguous":
            view = [common.prompt]
            for other, cut in zip(others, common.cuts, strict=False):
                view += [*other.done, other.segment, cut]
            return [*view, *worker.done, worker.segment]
        view = [common.prompt, common.past, common.others]
        for other, cut in zip(others, common.cuts, strict=False):
            view += [other.segment, cut]
        return [*view, common.own, worker.segment]

    def _suppressed(self) -> list[int]:
        ids = set(self.io.eos_token_ids)
        for text in _SUPPRESSED_TEXTS:
            tokens = self.io.tokenize(text)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return sorted(ids)

    async def _after_token(self, worker: _Worker) -> bool:
        """Close the worker's step if its newest token ended one; True when a step closed."""
        step_text = self._finished_step(worker)
        if step_text is None:
            return False
        io = self.io
        if not await self._fold(worker):  # its step's segment became its history (contiguous)
            worker.segment = await io.new_segment()
        worker.step += 1
        nudge = self.cfg.nudge_every > 0 and self.since_nudge >= self.cfg.nudge_every
        if nudge:
            self.since_nudge, self.nudges = 0, self.nudges + 1
        worker.pending += io.tokenize(self.prompts.header(worker.index, worker.step, nudge=nudge))
        return True

    async def _fold(self, worker: _Worker) -> bool:
        """The worker's finished step joins the history: copied onto its end, so views stay a few segments.

        A view then holds the prompt, the history and the current steps with their headers (about
        2 x workers + 3 segments) however many steps the run has taken, and the attention reads
        the history unshifted (it sits at the same place in every view). True when the step's
        segment was emptied in the same call, for the worker's next step.
        """
        io, step = self.io, worker.segment
        if self.cfg.layout != "contiguous":
            into = self.common.past
        elif worker.done:
            into = worker.done[0]  # each worker's finished steps, one segment
        else:
            worker.done.append(step)  # its first step becomes that segment
            return False
        await io.append_from(into, step, clear=True)
        return True

    def _finished_step(self, worker: _Worker) -> str | None:
        """The text of the step the worker's newest token finished (and note its answer), or None."""
        text = self.io.text(worker.index)
        new_chars, worker.seen = len(text) - worker.seen, len(text)
        sep = ends_step(text[worker.step_start :], new_chars)
        if sep is None:
            return None
        step_text = text[worker.step_start : worker.step_start + sep]
        worker.step_start += sep
        self.history_texts.append(step_text)
        found = last_boxed(step_text)
        if found is not None and self.cfg.stop_at_answer and self.answer is None:
            self.answer, self.answered_at = found, self.io.num_forward_passes
        return step_text

    # -- the finisher ----------------------------------------------------------------------------

    async def finish(self) -> None:
        """Greedy, from the last worker's view: no re-encoding (documented in docs/hogwild.md)."""
        io, last = self.io, self.team[-1]
        view = [last.segment] if self.cfg.workers == 1 else self.view(last)
        opening = self.prompts.finisher
        trace = await io.continue_greedy(
            "finisher",
            worker=last.index,
            view=view,
            token_ids=last.pending + io.tokenize(opening),
            max_tokens=self.cfg.finisher_tokens,
            done=lambda text: last_boxed(opening + text) is not None,
        )
        transcript = self.transcript()  # before the finisher's text joins it
        self.finisher_text = trace.text
        trace.answer = finisher_answer(opening, trace.text, transcript)
        self.answer = trace.answer

    async def finish_reencoded(
        self, ctx: RunContext, messages: list[ChatMessage], flattened: str, parents: list[int]
    ) -> None:
        """The reference's finisher: the flattened text re-encoded in a fresh request, decoded greedily."""
        opening = self.prompts.finisher
        reply = ChatMessage(role="assistant", content=flattened + opening)
        request = ctx.request(
            messages=[*messages, reply],
            continue_final=True,
            temperature=0.0,
            max_tokens=self.cfg.finisher_tokens,
        )
        trace: Trace = await ctx.sample(request, label="finisher", parents=parents)
        transcript = self.transcript()
        self.finisher_text = trace.text
        trace.answer = finisher_answer(opening, trace.text, transcript) if trace.is_ok else None
        self.answer = trace.answer

    # -- the result ------------------------------------------------------------------------------

    def flattened(self) -> str:
        """The run as the reference's finisher reads it: the history, then every worker's current step."""
        if self.cfg.workers == 1:
            return self.io.text(0)
        prompts = self.prompts
        parts = [prompts.past_header, *self.history_texts, prompts.others_header]
        for worker in self.team:
            parts.append(self.io.text(worker.index)[worker.step_start :] + prompts.cut_marker)
        return "".join(parts)

    def transcript(self) -> str:
        """The run flattened: finished steps in order, then each worker's unfinished step."""
        parts = list(self.history_texts)
        for worker in self.team:
            unfinished = self.io.text(worker.index)[worker.step_start :]
            if unfinished.strip():
                parts.append(unfinished + self.prompts.cut_marker)
        if self.finisher_text is not None:
            parts.append(self.prompts.finisher + self.finisher_text)
        return "".join(parts)

    def metrics(self) -> dict[str, float]:
        found = {
            "forward_passes": float(self.io.num_forward_passes),
            "finished_steps": float(len(self.history_texts)),
            "nudges": float(self.nudges),
            "finisher": float(self.finisher_text is not None),
        }
        if self.answered_at is not None:
            found["answered_at_pass"] = float(self.answered_at)
        return found
