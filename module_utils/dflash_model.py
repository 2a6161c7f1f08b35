"""What the toolkit needs to know about a target model, from its config.json text (pure functions).

The seeds serve Qwen3.6-27B, a Qwen3.5-family *hybrid*: Gated DeltaNet (linear attention with a
recurrent and a convolution state) in three layers of four, full attention in every fourth. On
such targets sglang 0.5.11 needs a radix-cache / mamba-scheduler choice for speculative
decoding, and DDTREE's tree verify needs linear-attention kernels that follow a tree. This module
reads the facts (architecture, layer types, linear-attention kind) and says what cannot work;
the flag choices are rules in roles/dflash_instances/vars/main.yml (docs/fallbacks.md).
"""

from __future__ import annotations

import json

# architectures whose linear-attention layers sglang 0.5.11 runs with the Gated DeltaNet backend
# (GDNAttnBackend: its triton verify kernels follow retrieve_parent_token, i.e. a tree)
GATED_DELTANET_ARCHS = {
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM",
}  # fmt: skip
LINEAR_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gated_deltanet"}
# sglang flags whose value "flashinfer" makes the Gated DeltaNet verify kernel FlashInfer's, which
# refuses a tree (retrieve_parent_token must be None)
LINEAR_BACKEND_FLAGS = ("--linear-attn-backend", "--linear-attn-decode-backend", "--linear-attn-prefill-backend")


def target_facts(config_text):
    """-> {architecture, model_type, hybrid, linear_attention, layers, linear_layers, full_attention_interval,
    mamba_ssm_dtype, error}. The text config of a multimodal wrapper (text_config) is read too."""
    facts = {"architecture": None, "model_type": None, "hybrid": None, "linear_attention": None, "layers": None,
             "linear_layers": None, "full_attention_interval": None, "mamba_ssm_dtype": None, "error": None}  # fmt: skip
    try:
        cfg = json.loads(config_text)
    except ValueError as exc:
        facts["error"] = f"config.json is not JSON: {exc}"
        return facts
    if not isinstance(cfg, dict):
        facts["error"] = "config.json is not a JSON object"
        return facts
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    archs = cfg.get("architectures") or text.get("architectures") or []
    facts["architecture"] = archs[0] if isinstance(archs, list) and archs else None
    facts["model_type"] = cfg.get("model_type")
    n = text.get("num_hidden_layers")
    facts["layers"] = n if isinstance(n, int) else None
    interval = text.get("full_attention_interval")
    facts["full_attention_interval"] = interval if isinstance(interval, int) else None
    facts["mamba_ssm_dtype"] = text.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_dtype")
    types = text.get("layer_types")
    if isinstance(types, list):
        linear = sum(1 for t in types if t in LINEAR_LAYER_TYPES)
    elif facts["full_attention_interval"] and facts["layers"]:  # sglang derives the pattern from the interval
        linear = facts["layers"] - facts["layers"] // facts["full_attention_interval"]
    else:
        linear = 0
    facts["linear_layers"] = linear
    facts["hybrid"] = bool(linear) or facts["architecture"] in GATED_DELTANET_ARCHS
    if facts["hybrid"]:
        facts["linear_attention"] = ("gated_deltanet" if facts["architecture"] in GATED_DELTANET_ARCHS
                                     or "linear_key_head_dim" in text else "other")  # fmt: skip
    return facts


def _flag_values(args, flag):
    """Values given to flag in an argument list (--flag v and --flag=v)."""
    out = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out.append(str(args[i + 1]))
        elif a.startswith(flag + "="):
            out.append(a.split("=", 1)[1])
    return out


def user_args(inst):
    """The instance's own sglang arguments: extra_args, then pin_flags as --flag value."""
    args = [str(a) for a in inst.get("extra_args") or [] if isinstance(a, (str, int, float))]
    for flag, value in (inst.get("pin_flags") or {}).items():
        args.append(str(flag))
        if value is not None and not isinstance(value, bool):
            args.append(str(value))
    return args


def radix_cache_disabled(inst):
    return "--disable-radix-cache" in user_args(inst)


def hybrid_instance_errors(inst, facts):
    """[(field, message)] for what cannot work on this hybrid target; [] if none (or not hybrid)."""
    if not facts or not facts.get("hybrid"):
        return []
    errors = []
    args = user_args(inst)
    algo = inst.get("algorithm")
    mode = (inst.get("ddtree") or {}).get("mode", "tree")
    arch = facts.get("architecture") or "this model"
    if algo == "DDTREE" and mode == "tree":
        if facts.get("linear_attention") != "gated_deltanet":
            errors.append(("ddtree.mode", (f"DDTREE tree verify on {arch}: its linear-attention layers are not "
                                          "Gated DeltaNet, whose sglang kernels follow a tree (each node's state "
                                          "from its parent's); use ddtree.mode shadow-linear (verifies a chain), "
                                          "or algorithm DFLASH")))  # fmt: skip
        for flag in LINEAR_BACKEND_FLAGS:
            if "flashinfer" in _flag_values(args, flag):
                errors.append(("extra_args", (f"{flag} flashinfer: FlashInfer's Gated DeltaNet verify kernel cannot "
                                             f"follow a tree, so DDTREE tree verify cannot run on {arch} with it; "
                                             "drop the flag (triton is sglang's default) or set ddtree.mode "
                                             "shadow-linear")))  # fmt: skip
    if algo in ("DFLASH", "DDTREE") and "no_buffer" in _flag_values(args, "--mamba-scheduler-strategy") \
            and "--disable-radix-cache" not in args:  # fmt: skip
        errors.append(("extra_args", (f"--mamba-scheduler-strategy no_buffer with the radix cache on: sglang 0.5.11 "
                                     f"refuses speculative decoding on the hybrid {arch} then (ValueError at start); "
                                     "drop the flag (the toolkit then picks extra_buffer) or add "
                                     "--disable-radix-cache")))  # fmt: skip
    return errors
