"""paragen's in-process inference engine (needs the [engine] extra: torch, transformers, gguf).

Shaped like nano-vllm: ``sequence`` (state), ``cache`` (paged KV blocks), ``scheduler``,
``model`` (the forward), ``model_runner`` (tensors in, tokens out), ``sampler``,
``detokenizer``, ``loader`` (checkpoints and GGUF), ``llm_engine`` (the synchronous step
loop) and ``async_engine`` (one worker thread, anyio streams). Import the submodules
directly; this package imports nothing so that importing it stays cheap.
"""
