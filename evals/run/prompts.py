"""Prompt templates by name, or from a user's file: the words a sweep asks its problems in.

A run's template is the task's default unless ``--prompt`` names another one or a file.
Named templates reproduce the published harnesses' wording exactly (sources below); the
text is the data, so a run records the template whole, once, in its run.json; each record names
it (name, hash of the words, source) without its text, which may be a file of any size.

- ``paragen``: paragen's own system prompt, the question as the user message.
- ``proof``: paragen's own wording for proof tasks (graded by judges, evals.run.judging): a system
  prompt asking for a complete, rigorous proof, the problem as the user message.
- ``matharena`` / ``matharena-aime``: MathArena's final-answer competitions. The user
  message is the competition's instruction, a blank line, then the problem; no system
  message. ``src/matharena/runner.py`` builds ``f"{instruction}\\n\\n{problem}"``; the
  instructions are in ``configs/competitions/hmmt/hmmt_feb_2025.yaml``,
  ``brumo/brumo_2025.yaml`` ("Put your final answer within \\boxed{}.") and
  ``aime/aime_2026.yaml`` (adds "The answer is an integer between 0 and 999 inclusive."),
  github.com/eth-sri/matharena.
- ``deepseek-r1``: the DeepSeek-R1 model card's usage recommendations (huggingface.co/
  deepseek-ai/DeepSeek-R1, "Usage Recommendations"): no system prompt, and for math the
  directive "Please reason step by step, and put your final answer within \\boxed{}." in
  the user prompt. The card does not say where in the prompt; this puts it on the line
  after the problem, as Qwen2.5-Math's evaluation does for its ``qwen-boxed`` template.
- ``qwen25-math-cot``: Qwen2.5-Math's evaluation (github.com/QwenLM/Qwen2.5-Math,
  ``evaluation/utils.py``, ``PROMPT_TEMPLATES["qwen25-math-cot"]``): the same directive as
  the system message, the question alone as the user message.

A user's file is a TOML table (``user = "... {problem} ..."``, optional ``system``, optional
``name``) or, with any other suffix, plain text used as the user message. Either must hold
``{problem}`` once.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paragen.errors import ConfigError
from paragen.prompts import PARAGEN, PROBLEM, PromptTemplate

STEP_BY_STEP = "Please reason step by step, and put your final answer within \\boxed{}."
MATHARENA_BOXED = "Put your final answer within \\boxed{}."
MATHARENA_AIME = MATHARENA_BOXED + "\nThe answer is an integer between 0 and 999 inclusive."
_MATHARENA = "github.com/eth-sri/matharena src/matharena/runner.py + configs/competitions/"

PROOF_SYSTEM = (
    "You are a careful mathematician. Write a complete and rigorous proof of the statement you are "
    "given: state what you assume, justify every step, and do not skip cases. End with a short "
    "conclusion stating what has been proved."
)

TEMPLATES: dict[str, PromptTemplate] = {
    t.name: t
    for t in (
        PARAGEN,
        PromptTemplate("proof", PROBLEM, PROOF_SYSTEM, "paragen"),
        PromptTemplate("matharena", MATHARENA_BOXED + "\n\n" + PROBLEM, None, _MATHARENA + "hmmt, brumo"),
        PromptTemplate("matharena-aime", MATHARENA_AIME + "\n\n" + PROBLEM, None, _MATHARENA + "aime"),
        PromptTemplate(
            "deepseek-r1",
            PROBLEM + "\n" + STEP_BY_STEP,
            None,
            "huggingface.co/deepseek-ai/DeepSeek-R1 README, Usage Recommendations",
        ),
        PromptTemplate(
            "qwen25-math-cot",
            PROBLEM,
            STEP_BY_STEP,
            "github.com/QwenLM/Qwen2.5-Math evaluation/utils.py PROMPT_TEMPLATES['qwen25-math-cot']",
        ),
    )
}


class PromptRecord(BaseModel):
    """A template as run.json and the records keep it: whole, with a short hash to compare by."""

    model_config = ConfigDict(extra="forbid")

    name: str
    system: str | None
    user: str
    source: str
    sha256: str

    @classmethod
    def of(cls, template: PromptTemplate) -> PromptRecord:
        return cls(
            name=template.name,
            system=template.system,
            user=template.user,
            source=template.source,
            sha256=template_sha256(template),
        )

    def ref(self) -> PromptRef:
        """The template as a record names it: without its words (run.json holds them)."""
        return PromptRef(name=self.name, source=self.source, sha256=self.sha256)


class PromptRef(BaseModel):
    """A template as each record names it: its name, source and hash, the words being in run.json.

    Records written before this kept the words too; reading them drops those."""

    model_config = ConfigDict(extra="ignore")

    name: str
    source: str
    sha256: str


def template_sha256(template: PromptTemplate) -> str:
    """A hash of the words (not the name or source): two names for one wording hash alike."""
    blob = json.dumps({"system": template.system, "user": template.user}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def prompt_setting(template: PromptTemplate) -> str | None:
    """How a template enters a run's settings: not at all for paragen's own wording, so runs
    recorded before templates existed keep their settings ids."""
    sha = template_sha256(template)
    return None if sha == template_sha256(PARAGEN) else f"{template.name}@{sha}"


def get_template(spec: str) -> PromptTemplate:
    """A named template, or one read from a file; one ConfigError line for anything else."""
    if spec in TEMPLATES:
        return TEMPLATES[spec]
    path = Path(spec)
    if not path.suffix and not path.exists():
        raise ConfigError(
            f"unknown prompt template {spec!r}", hint=f"use one of {', '.join(TEMPLATES)}, or a file"
        )
    if not path.is_file():
        raise ConfigError(f"prompt file {spec!r} does not exist")
    return _from_file(path)


def _from_file(path: Path) -> PromptTemplate:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read prompt file {path}: {exc}") from None
    if path.suffix.lower() != ".toml":
        return _checked(PromptTemplate(name=path.stem, user=text, source=str(path)), path)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"prompt file {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(table) - {"name", "system", "user"})
    if unknown:
        raise ConfigError(f"prompt file {path} has unknown keys {unknown}", hint="use name, system, user")
    user, system, name = table.get("user"), table.get("system"), table.get("name", path.stem)
    if not isinstance(user, str) or not isinstance(name, str) or not isinstance(system, str | None):
        raise ConfigError(f"prompt file {path}: user (and system, name if given) must be strings")
    return _checked(PromptTemplate(name=name, user=user, system=system, source=str(path)), path)


def _checked(template: PromptTemplate, path: Path) -> PromptTemplate:
    count = template.user.count(PROBLEM)
    if count != 1:
        raise ConfigError(
            f"prompt file {path}: the user text must hold {PROBLEM} once (it holds it {count} times)"
        )
    return template
