"""llama.cpp (llama-cpp-python) on a GGUF: the n samples generated one after another, in a child process.

``llamacpp_tps`` runs this file as a child (``baselines.run_isolated``), so a llama.cpp that is missing
or crashes is a figure of ``None`` with a line saying why, not the end of the benchmark.
"""

from __future__ import annotations

import argparse
from typing import Any

from baselines import run_isolated
from engine_measure import best_time


def llamacpp_tps(
    gguf: str, prompt: str, n: int, tokens: int, threads: int
) -> tuple[float | None, str | None]:
    """llama.cpp's aggregate tokens/s over ``n`` samples of ``tokens`` tokens each, or why not."""
    args = ["--prompt", prompt, "--n", str(n), "--tokens", str(tokens), "--threads", str(threads)]
    return run_isolated([__file__, gguf, *args])


def llamacpp_measure(llama: Any, gguf: str, prompt: str, n: int, tokens: int, threads: int) -> float:
    llm = llama(model_path=gguf, n_ctx=512, n_threads=threads, n_batch=512, verbose=False, seed=0)
    eos = llm.token_eos()

    def run() -> None:
        for i in range(n):  # the same n samples, one after another
            llm.create_completion(prompt, max_tokens=tokens, temperature=0.7, seed=i, logit_bias={eos: -1e9})

    return n * tokens / best_time(run)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError:
        print("none: llama_cpp is not installed")
        return
    print(llamacpp_measure(Llama, args.gguf, args.prompt, args.n, args.tokens, args.threads))


if __name__ == "__main__":
    main()
