"""Plain decode steps with the model code of another revision (``--rev``) and of this tree, interleaved.

The Hogwild! path shares ``Model.forward`` with the plain decode (an optional attention argument, and
the RoPE slice starting at a variable head instead of 0); this checks that a plain decode step costs
what it costs at another revision.
Both models hold the same weights and run the same engine's batch step by step, alternating in
rounds (in ABBA order), so both see the same load; each figure is the best step of its rounds. Last line JSON:
{"after_over_before_n1", "after_over_before_n8", "raw"}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from paragen.engine import loader
from paragen.engine.llm_engine import LLMEngine
from paragen.engine.model import Model
from paragen.types import SamplingParams

ROUNDS, STEPS, CONTEXT = 6, 10, 600
TEXT = "The history of the printing press begins in the fifteenth century. "


def model_module_at(rev: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{rev}:paragen/engine/model.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "model_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("model_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_before"] = module
    spec.loader.exec_module(module)
    return module


def best_ms(engine: LLMEngine) -> float:
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
    return 1000 * min(times)


def compare(engine: LLMEngine, before: object, after: object, n: int) -> tuple[float, float]:
    own = engine.runner.model
    ids = engine.tokenizer(TEXT * 60, add_special_tokens=False)["input_ids"][:CONTEXT]
    engine.add_request(ids, SamplingParams(max_tokens=10_000, temperature=0.7, seed=0), n, ignore_eos=True)
    engine.step()
    times: dict[str, list[float]] = {"before": [], "after": []}
    pair = [("before", before), ("after", after)]
    for round_ in range(ROUNDS):
        # ABBA order: whichever model runs second in a round does not always get the warmer caches.
        for name, model in pair if round_ % 2 == 0 else pair[::-1]:
            engine.runner.model = model  # type: ignore[assignment]
            times[name].append(best_ms(engine))
    engine.runner.model = own
    for seq_id in list(engine.seqs):
        engine.abort(seq_id)
    return min(times["before"]), min(times["after"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", default="main", help="the revision whose model.py is 'before'")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args()
    engine = LLMEngine(args.model, dtype=args.dtype)
    old = model_module_at(args.rev)
    tensors = loader.load_tensors(loader.resolve(args.model))
    device = str(engine.model.device)
    # Both built here the same way: the engine's own model, loaded earlier, can run a few percent apart
    # from a second instance of the very same code (an A/A run, --rev HEAD): placement, not code.
    before = old.Model(engine.cfg, tensors, engine.dtype, device)
    after = Model(engine.cfg, tensors, engine.dtype, device)
    raw: dict[str, float] = {}
    for n in (1, 8):
        b, a = compare(engine, before, after, n)
        raw |= {f"before_n{n}_ms": round(b, 2), f"after_n{n}_ms": round(a, 2)}
        print(f"n={n}: before {b:.2f} ms/step, after {a:.2f} ms/step")
    print(f"{engine.dtype}, {engine.num_threads} threads, context {CONTEXT}, rev {args.rev}")
    result = {
        "after_over_before_n1": round(raw["after_n1_ms"] / raw["before_n1_ms"], 3),
        "after_over_before_n8": round(raw["after_n8_ms"] / raw["before_n8_ms"], 3),
        "raw": raw,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
