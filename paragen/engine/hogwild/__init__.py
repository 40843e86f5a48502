"""Hogwild! shared sessions in the engine: several workers decoding over one shared KV cache.

``session`` (a session's views and the rows of its passes) over ``segments`` (its runs of tokens
in the engine's blocks), ``batch`` (several sessions' rows in one forward), ``forward`` (the model
forward over placed rows, and their samples). How a
row reads its view: ``view`` (its slots and shifts), then per attention path ``groups`` with
``layout`` and ``class_regions`` for ``torch_attention`` (torch), ``fused_reads`` (the fused CPU
kernel), ``triton_reads`` and ``graphs`` (the Triton kernel, its passes replayed from CUDA graphs).
Import the submodules directly; this package imports nothing.
"""
