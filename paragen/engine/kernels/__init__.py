"""The engine's attention kernels over lists of cache slots, for the plain decode and Hogwild! alike.

``fused`` (a C kernel, ``paged_attention.c``, compiled on first use: the CPU's) and
``triton_attention`` (``triton_kernels``: CUDA's). Import the submodules directly; this package
imports nothing.
"""
