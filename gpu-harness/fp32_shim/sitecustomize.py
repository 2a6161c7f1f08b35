"""Test-only, for the float32 re-scoring server of gpu-harness/ddtree_lossless.py (never in production).

sglang 0.5.11's CUDA custom ops (sgl_kernel's rmsnorm, gemma_rmsnorm, activation and rope kernels)
accept float16/bfloat16 only ("failed to dispatch data type Float"), and its Gated DeltaNet prefill
kernel refuses float32 ("ChunkGatedDeltaRuleFunction does not support float32"). With this folder first
on PYTHONPATH, Python imports this file at start-up in every sglang process; as each module below is
imported, the shim patches it, before anyone else imports from it:
- sglang's MultiPlatformOp: a call with a float32 tensor argument runs the op's own forward_native
  (plain torch), everything else the CUDA kernel as before;
- the GDN ops (fp32_gdn.PATCHES: chunked prefill, packed decode, sigmoid-gating decode): float32 inputs
  run fp32_gdn's plain-torch recurrence, everything else the original Triton kernel, unchanged;
- the Triton extend attention: float32 calls get half-size tiles (fp32_attention.py: shared memory);
- the DFlash draft model: float32 weights get float32 input_embeds (fp32_draft.py: sglang's eager
  extend path casts them to bfloat16).
"""

import importlib.abc
import importlib.util
import os
import sys

MULTI_PLATFORM = "sglang.srt.layers.utils.multi_platform"
# each version's module paths (0.5.11: sglang/srt/layers/attention/; from 0.5.17 the kernels moved to
# sglang/kernels/ops/attention/ with the same names): whichever the server imports is patched
GDN = tuple(f"{pkg}.{m}" for pkg in ("sglang.srt.layers.attention.fla", "sglang.kernels.ops.attention.fla")
            for m in ("chunk", "fused_recurrent", "fused_sigmoid_gating_recurrent"))  # (= fp32_gdn.PATCHES)
EXTEND_ATTENTION = ("sglang.srt.layers.attention.triton_ops.extend_attention",
                    "sglang.kernels.ops.attention.extend_attention")
DFLASH_DRAFT = "sglang.srt.models.dflash"


def _patch_multi_platform(module):
    import torch

    cls = module.MultiPlatformOp
    original = cls.dispatch_forward

    def dispatch_forward(self):
        fast = original(self)
        native = self.forward_native

        def forward(*args, **kwargs):
            for a in (*args, *kwargs.values()):
                if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
                    return native(*args, **kwargs)
            return fast(*args, **kwargs)

        return forward

    cls.dispatch_forward = dispatch_forward
    print("fp32_shim: sglang MultiPlatformOp runs forward_native on float32 inputs (TEST ONLY)", file=sys.stderr)


def _here():
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)


def _patch_extend_attention(module):
    _here()
    import fp32_attention

    fp32_attention.patch(module)


def _patch_dflash_draft(module):
    _here()
    import fp32_draft

    fp32_draft.patch(module)


def _patch_gdn(module):
    _here()
    import fp32_gdn

    fp32_gdn.patch(module)
    print(f"fp32_shim: {module.__name__}: float32 Gated DeltaNet runs plain torch (TEST ONLY)", file=sys.stderr)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, patches):
        self.patches = dict(patches)
        self.busy = set()

    def find_spec(self, name, path, target=None):
        if name not in self.patches or name in self.busy:
            return None
        self.busy.add(name)  # the real finders answer the lookup below
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        if spec is None or spec.loader is None:
            return spec
        patch = self.patches.pop(name)
        if not self.patches:
            sys.meta_path.remove(self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder({MULTI_PLATFORM: _patch_multi_platform, DFLASH_DRAFT: _patch_dflash_draft,
                                 **{m: _patch_extend_attention for m in EXTEND_ATTENTION},
                                 **{m: _patch_gdn for m in GDN}}))  # fmt: skip
