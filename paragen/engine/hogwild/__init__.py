"""Hogwild! shared sessions in the engine: several workers decoding over one shared KV cache.

One pass, in reading order: ``session`` (a session's views, the rows of its passes placed in the
cache) over ``segments`` (its runs of tokens in the engine's blocks); ``batch`` (several sessions'
rows in one forward); ``forward`` (the model forward over the placed rows, and their samples), which
builds the pass's ``reads`` plan once (which key classes, which slots, which rotations) and hands it
to an attention in ``paragen.engine.kernels`` (``fused``: the C kernel on a CPU; ``triton_attention``:
CUDA, its passes replayed from CUDA graphs by ``graphs``; ``torch_attention`` elsewhere). Import the
submodules directly; this package imports nothing.
"""
