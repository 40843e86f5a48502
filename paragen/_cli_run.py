"""``paragen run``: execute one strategy on one question and show what happened."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import anyio
from rich.console import Console
from rich.table import Table

from paragen import tracing
from paragen._live_view import WorkerColumns
from paragen.backends.base import Backend
from paragen.config import Budget
from paragen.errors import BackendError, ConfigError, invalid_fields
from paragen.orchestrator import Orchestrator
from paragen.signals import until_terminated
from paragen.strategy import Strategy
from paragen.types import Problem, SamplingParams, StrategyResult, Trace


def execute_run(
    problem: Problem,
    strategy: Strategy,
    *,
    backend: Backend,
    sampling: SamplingParams,
    budget: Budget,
    as_json: bool,
    out: Path | None,
    otlp_endpoint: str | None = None,
) -> None:
    """Run ``strategy`` on ``problem`` (the CLI has checked ``out`` before anything was generated)."""

    async def go() -> StrategyResult:
        try:
            async with Orchestrator(
                backend, defaults=sampling, budget=budget, on_event=view.on_event
            ) as orchestrator:
                await orchestrator.open()
                await check_before_run(backend, strategy, problem, sampling)
                return await orchestrator.run(strategy, problem)
        finally:
            await backend.aclose()

    # Tracing where the flag or OTEL_* asks; its spans are flushed before the command returns.
    with (
        tracing.configured(otlp_endpoint),
        WorkerColumns(Console(file=sys.stdout), enabled=not as_json) as view,
    ):
        result = anyio.run(until_terminated, go)
    _fail_if_nothing_ran(result)
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        show(result)
    if out is not None:  # checked before the run; shown first, so a late failure loses nothing
        try:
            write_atomic(out, result.model_dump_json(indent=2))
        except OSError as exc:
            raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None


async def check_before_run(
    backend: Backend, strategy: Strategy, problem: Problem, sampling: SamplingParams
) -> None:
    """Preflight (paragen.preflight): refuse at once what cannot run; warn of what runs in part."""
    from paragen.preflight import preflight

    verdict = await preflight(backend, [(strategy.name, strategy)], problem, sampling=sampling)
    for line in verdict.warnings:
        print(f"warning: {line}", file=sys.stderr)
    verdict.raise_errors()


def cli_problem(question: str) -> Problem:
    from pydantic import ValidationError

    try:
        return Problem(id="cli", question=question)
    except ValidationError as exc:
        raise ConfigError(f"bad question: {invalid_fields(exc)[0].message}") from None


def _fail_if_nothing_ran(result: StrategyResult) -> None:
    """A run whose every sample failed is a setup problem (server down, wrong key): say so once."""
    samples = [t for t in result.traces if t.kind == "sample"]
    if samples and all(t.status == "error" for t in samples):
        raise BackendError(f"every sample failed; first error: {samples[0].error}")
    if result.stop_reason == "error" and result.error:
        raise BackendError(result.error)


def write_atomic(path: Path, text: str) -> None:
    """Write the whole file or nothing: a temp file in the same folder, fsynced, then renamed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def show(result: StrategyResult, console: Console | None = None) -> None:
    console = console or Console(file=sys.stdout)
    answer = "NO_ANSWER" if result.answer is None else result.answer
    console.print(
        f"[bold]answer[/bold]: {answer}   ([dim]{result.strategy}, stop: {result.stop_reason}[/dim])"
    )
    table = Table("id", "label", "status", "tokens", "start s", "end s", "answer", "why")
    for t in result.traces:
        end = "-" if t.end is None else f"{t.end:.3f}"
        why = t.cancel_reason or t.error or t.finish_reason or ""
        table.add_row(
            str(t.id),
            t.label,
            t.status,
            _tokens(t),
            f"{t.start:.3f}",
            end,
            t.answer or "",
            why[:60],
        )
    console.print(table)
    samples = [t for t in result.traces if t.kind == "sample"]
    failed = [t for t in samples if t.status == "error"]
    if failed:
        # A run can end "done" over the samples that survived: say that some did not, and why.
        console.print(f"[yellow]{len(failed)} of {len(samples)} samples failed[/yellow]: {failed[0].error}")
    u = result.usage
    ttft = "-" if u.ttft_s is None else f"{u.ttft_s:.3f}s"
    console.print(
        f"tokens: total {u.total_tokens}, sequential {u.sequential_tokens}, wasted {u.wasted_tokens}, "
        f"prompt {u.prompt_tokens} (cached {u.cached_prompt_tokens}), judge {u.judge_tokens}, "
        f"probes {u.num_probes} ({u.probe_tokens} tokens), scores {u.num_scores} ({u.score_tokens} tokens); "
        f"latency {u.latency_s:.3f}s, ttft {ttft}; counted by {', '.join(u.count_sources) or '-'}"
    )
    if u.reasoning_tokens or u.num_open_thinking:
        console.print(
            f"thinking: {u.reasoning_tokens} tokens, answers {u.answer_tokens} tokens; "
            f"{u.num_open_thinking} of {u.num_samples} samples ended while thinking (no answer)"
        )
    if result.metrics:
        console.print("metrics: " + json.dumps(result.metrics))


def _tokens(trace: Trace) -> str:
    """A trace's generated tokens, and of them its thinking's where it thought."""
    if trace.thinking == "none":
        return str(trace.completion_tokens)
    still = ", open" if trace.thinking == "open" else ""
    return f"{trace.completion_tokens} (think {trace.reasoning_tokens}{still})"
