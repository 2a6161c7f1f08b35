"""Test-only, for the float32 re-scoring server of bench/gpu/ddtree_lossless.py (never in production).

sglang 0.5.11's CUDA custom ops (sgl_kernel's rmsnorm, gemma_rmsnorm, activation and rope kernels)
accept float16/bfloat16 only ("failed to dispatch data type Float"). With this folder first on
PYTHONPATH, Python imports this file at start-up in every sglang process; when sglang's
MultiPlatformOp module is imported, its dispatch is wrapped so that a call with a float32 tensor
argument runs the op's own forward_native (plain torch), everything else the CUDA kernel as before.
"""

import importlib.abc
import importlib.util
import sys

TARGET = "sglang.srt.layers.utils.multi_platform"


def _patch(module):
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


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
