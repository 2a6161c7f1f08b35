"""Test-only: the DFlash draft model in float32 without CUDA graphs, for gpu-harness/ddtree_lossless.py.

sglang 0.5.11's ModelRunner.forward_extend hands a model its `input_embeds` as
`forward_batch.input_embeds.bfloat16()` whatever the model's dtype (model_runner.py, the eager extend
path; the CUDA-graph path keeps the buffer's dtype). The DFlash draft gets the target's embeddings as
input_embeds, so a float32 server with --disable-cuda-graph stops at the draft's first projection
("expected mat1 and mat2 to have the same dtype ... BFloat16 != float", H200 run of 2026-12-02).
The patched forward casts input_embeds back to the draft's parameter dtype when that is float32;
bfloat16/float16 drafts are called exactly as before. (The float32 embeddings lose their low bits in
that round trip, the same for DFLASH and DDTREE; the draft only proposes, the target decides.)
"""

import functools
import sys

import torch


def float32_embeds(forward):
    @functools.wraps(forward)
    def wrapper(self, input_ids, positions, forward_batch, input_embeds=None, *args, **kwargs):
        if isinstance(input_embeds, torch.Tensor):
            want = next(self.parameters()).dtype
            if want == torch.float32 and input_embeds.dtype != want:
                input_embeds = input_embeds.to(want)
        return forward(self, input_ids, positions, forward_batch, input_embeds, *args, **kwargs)

    return wrapper


def patch(module):
    cls = module.EntryClass  # the class sglang's model registry loads from sglang.srt.models.dflash
    cls.forward = float32_embeds(cls.forward)
    print(f"fp32_shim: {cls.__name__} takes float32 input_embeds when its weights are float32 (TEST ONLY)",
          file=sys.stderr)  # fmt: skip
