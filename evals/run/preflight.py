"""Before a sweep writes or generates anything: can every configuration run, and on which model?

Every (strategy, n) of the sweep goes through paragen.preflight on the opened backend: what cannot
run ends the sweep with one line each (exit 2, nothing written); what runs only in part is a
warning line up front. The backend's model is read here too (``model_info()``: the engine's file
and sha256, a server's /models entry) for run.json and every record, and a preset's model is held
against it: a published setting run on another model says so (``model_matches_preset: false``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from evals.run.spec import EvalSpec
from paragen.backends.base import Backend
from paragen.preflight import preflight


async def check_sweep(
    spec: EvalSpec, backend: Backend, backends: Mapping[str, Backend] | None = None
) -> dict[str, Any]:
    """Preflight every configuration of ``spec`` (raises PreflightError), with the ``backends`` its
    strategies may read with; the model's provenance for run.json (``model``, ``preset_model``,
    ``model_matches_preset``)."""
    strategies = [(f"{c.name} n={c.n}", c.strategy) for c in spec.combos]
    warnings: list[str] = []
    if spec.problems:
        first, sampling = spec.problems[0], spec.sampling.params
        verdict = await preflight(backend, strategies, first, sampling=sampling, backends=backends)
        verdict.raise_errors()
        warnings += verdict.warnings
    provenance = model_provenance(backend, spec.preset)
    if provenance["model_matches_preset"] is False:
        warnings.append(
            f"the preset is of {provenance['preset_model']}, the backend runs {provenance['model']['name']}: "
            "its published figures are not this model's"
        )
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return provenance


def model_provenance(backend: Backend, preset: dict[str, Any] | None) -> dict[str, Any]:
    """The model that answers, and whether it is the preset's (None: no preset)."""
    describe = getattr(backend, "model_info", None)
    model: dict[str, Any] = describe() if callable(describe) else {"name": backend.name}
    preset_model = preset.get("model") if preset else None
    matches = None if preset_model is None else same_model(str(preset_model), model)
    return {"model": model, "preset_model": preset_model, "model_matches_preset": matches}


def same_model(wanted: str, model: dict[str, Any]) -> bool:
    """Whether ``model`` (a model_info) is ``wanted`` (a hub id): its last part, in any case, is the
    name, path or listed id of the model (a GGUF of it, ``...-Q4_K_M.gguf``, counts)."""
    key = PurePath(wanted).name.lower()
    listed = model.get("listed") or {}
    names = [model.get("name"), model.get("path"), listed.get("id") if isinstance(listed, dict) else None]
    return any(key in str(name).lower() for name in names if name)
