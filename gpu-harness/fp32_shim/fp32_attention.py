"""Test-only: sglang's Triton extend (prefill) attention in float32, for the float32 re-scoring server.

sglang 0.5.11 (and 0.5.17, in sglang/kernels/ops/attention/extend_attention.py) sizes the extend kernel's tiles for 16-bit inputs (on Hopper BLOCK_M 128 x BLOCK_N 64 for
head_dim <= 256). In float32 the same tiles take twice the shared memory: for the hybrid model's
head_dim 256 that is past the H200's 227 KiB per block. While an extend call has a float32 query, the
block sizes are halved (the same bytes as the 16-bit tiles; only the summation order changes, not
the math); every other call keeps sglang's sizes unchanged.
"""

import functools
import sys

import torch

SIZES = "_get_block_sizes_for_extend_attention"  # returns (DMODEL, DPE, DV, BLOCK_M, BLOCK_N, num_warps)
ENTRY_POINTS = ("extend_attention_fwd", "extend_attention_fwd_unified")  # first argument: the query


def patch(module):
    if not hasattr(module, SIZES):  # a module of another layout: nothing to halve
        print(f"fp32_shim: {module.__name__} has no {SIZES}: extend attention left as it is", file=sys.stderr)
        return
    original_sizes = getattr(module, SIZES)
    state = {"float32": 0}

    @functools.wraps(original_sizes)
    def sizes(*args, **kwargs):
        dm, dpe, dv, bm, bn, warps = original_sizes(*args, **kwargs)
        if state["float32"]:
            bm, bn = max(16, bm // 2), max(16, bn // 2)
        return dm, dpe, dv, bm, bn, warps

    def entry(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            q = args[0] if args else kwargs.get("q_extend", kwargs.get("q"))
            if not (isinstance(q, torch.Tensor) and q.dtype == torch.float32):
                return fn(*args, **kwargs)
            state["float32"] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                state["float32"] -= 1

        return wrapper

    setattr(module, SIZES, sizes)
    for name in ENTRY_POINTS:
        if hasattr(module, name):
            setattr(module, name, entry(getattr(module, name)))
    print("fp32_shim: float32 extend attention runs with halved Triton tiles (TEST ONLY)", file=sys.stderr)
