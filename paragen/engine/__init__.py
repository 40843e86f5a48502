"""paragen's in-process inference engine (needs the [engine] extra: torch, transformers, gguf).

Shaped like nano-vllm: ``sequence`` (state), ``cache`` (paged KV blocks), ``scheduler``,
``model`` (the forward) with ``attention``, ``model_runner`` (tensors in, tokens out),
``sampler``, ``detokenizer``, ``loader`` (checkpoints and GGUF), ``llm_engine`` (the synchronous
step loop) and ``async_engine`` (one worker thread; ``streams``: each request's outputs,
``calls``: functions run on it between steps); ``host`` (the machine: dtype, memory settings)
and ``cuda_graphs`` (decode passes replayed on CUDA). Two packages: ``kernels`` (the attention
kernels over lists of cache slots: a fused C kernel on a CPU, Triton on CUDA) and ``hogwild``
(Hogwild! shared sessions). Import the submodules directly; this package imports nothing so
that importing it stays cheap.
"""
