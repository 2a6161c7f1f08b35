"""What the pinned sglang (0.5.11 with this toolkit's patch series, files/patches/sglang/0.5.11/) accepts and does,
read from its source: the one place the fallback rules (as ``sglang.*`` facts of their context), the validation and
the diagnosis take these facts from. tests/unit/common/test_sglang_facts.py checks each against the pinned wheel's
source. The launch_server flags themselves are data: files/patches/sglang/<version>/server-flags.txt
(dflash_instances/server_flags.py). Pure data, no Ansible import.
"""

from __future__ import annotations

VERSION = "0.5.11"

# server_args.py ServerArgs.port: where a server listens without --port
DEFAULT_PORT = 30000

# server_args.py ATTENTION_BACKEND_CHOICES: what --attention-backend (and --prefill-/--decode-attention-backend,
# --speculative-draft-attention-backend) accept
ATTENTION_BACKENDS = ("triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer",
                      "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx",
                      "ascend", "intel_xpu")

# server_args.py _get_default_attn_backend: the backend sglang picks on Hopper (SM 9.x) without one given
HOPPER_DEFAULT_ATTENTION = "fa3"

# the backends whose target attention takes a per-request tree mask, which DDTREE's tree verify needs
# (patch 0102-ddtree-worker.patch refuses the others at start: "DDTREE needs a target attention backend that takes a
# tree mask")
TREE_MASK_ATTENTION_BACKENDS = ("triton", "flashinfer")

# server_args.py _handle_model_specific_adjustments: architectures whose first layer may not be an attention layer,
# on which sglang refuses the triton attention backend ("... does not support triton attention backend")
NO_TRITON_ATTENTION_ARCHS = ("NemotronHForCausalLM", "Lfm2ForCausalLM")


def either(backends) -> str:
    """``('triton', 'flashinfer')`` -> ``'triton or flashinfer'`` (for messages)."""
    backends = list(backends)
    return " or ".join(backends) if len(backends) < 3 else ", ".join(backends[:-1]) + " or " + backends[-1]
