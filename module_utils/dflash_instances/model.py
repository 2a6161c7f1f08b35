"""What the toolkit needs to know about a target model, from its config.json text (pure functions).

The seeds serve Qwen3.6-27B, a Qwen3.5-family *hybrid*: Gated DeltaNet (linear attention with a
recurrent and a convolution state) in three layers of four, full attention in every fourth. On
such targets sglang 0.5.11 needs a radix-cache / mamba-scheduler choice for speculative
decoding (from 0.5.17 sglang resolves it itself), and DDTREE's tree verify needs linear-attention kernels that
follow a tree. This module reads the facts (architecture, layer types, linear-attention kind) and says what cannot
work with the instance's sglang version (``sg``: dflash_common/sglang.py's Facts of that version); the flag choices
are rules in roles/dflash_instances/vars/main.yml (docs/fallbacks.md).
"""

from __future__ import annotations

import json

from ansible.module_utils.dflash_common.argv import flag_values
from ansible.module_utils.dflash_common.sglang import either

# architectures whose linear-attention layers sglang 0.5.11 runs with the Gated DeltaNet backend
# (GDNAttnBackend: its triton verify kernels follow retrieve_parent_token, i.e. a tree;
# model_runner.hybrid_gdn_config)
GATED_DELTANET_ARCHS = {
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM", "Qwen3NextForCausalLM", "JetNemotronForCausalLM", "JetVLMForConditionalGeneration",
}  # fmt: skip
# ... with the Mamba2 backend (model_runner.mamba2_config; GraniteMoeHybrid only with "mamba" layers)
MAMBA2_ARCHS = {
    "NemotronHForCausalLM", "FalconH1ForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM",
    "Lfm2VlForConditionalGeneration", "NemotronH_Nano_VL_V2", "GraniteMoeHybridForCausalLM",
}  # fmt: skip
# ... with other linear attention (Kimi Delta Attention; Bailing's lightning attention)
OTHER_LINEAR_ARCHS = {"KimiLinearForCausalLM": "kda", "BailingMoeV2_5ForCausalLM": "lightning"}
# How sglang 0.5.11 lets a hybrid target keep its radix cache under speculative decoding
# (server_args._handle_model_specific_adjustments -> _handle_mamba_radix_cache):
#   extra_buffer  --mamba-scheduler-strategy extra_buffer keeps it (no_buffer refuses: ValueError at start)
#   disable       extra_buffer is not supported there (asserted at start) and no_buffer refuses speculative
#                 decoding with the radix cache (ValueError): --disable-radix-cache
#   sglang        sglang turns the radix cache off itself ("not yet supported")
# Qwen3.5's text-only classes are not in that function; they get their family's choice.
RADIX_WITH_SPEC = {
    "Qwen3NextForCausalLM": "extra_buffer", "Qwen3_5ForConditionalGeneration": "extra_buffer",
    "Qwen3_5MoeForConditionalGeneration": "extra_buffer", "Qwen3_5ForCausalLM": "extra_buffer",
    "Qwen3_5MoeForCausalLM": "extra_buffer",
    "NemotronHForCausalLM": "disable", "FalconH1ForCausalLM": "disable", "JetNemotronForCausalLM": "disable",
    "JetVLMForConditionalGeneration": "disable", "GraniteMoeHybridForCausalLM": "disable",
    "Lfm2ForCausalLM": "disable",
    "KimiLinearForCausalLM": "sglang", "BailingMoeV2_5ForCausalLM": "sglang",
}  # fmt: skip
# layer_types values of linear layers ("conv": LFM2's short-convolution layers)
LINEAR_LAYER_TYPES = {"linear_attention", "mamba", "mamba2", "gated_deltanet", "conv"}
# sglang flags whose value "flashinfer" makes the Gated DeltaNet verify kernel FlashInfer's, which
# refuses a tree (retrieve_parent_token must be None)
LINEAR_BACKEND_FLAGS = ("--linear-attn-backend", "--linear-attn-decode-backend", "--linear-attn-prefill-backend")
# the mamba radix-cache strategy: --mamba-scheduler-strategy up to 0.5.17 (a deprecated alias there),
# --mamba-radix-cache-strategy from 0.5.17 (the only one in 0.5.23)
MAMBA_STRATEGY_FLAGS = ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy")


def target_facts(config_text):
    """-> {architecture, model_type, hybrid, linear_attention, layers, linear_layers, full_attention_interval,
    mamba_ssm_dtype, radix_with_spec, error}. The text config of a multimodal wrapper (text_config, or
    NemotronH-VL's llm_config) is read too. The layer pattern comes from ``layer_types``, NemotronH's
    ``hybrid_override_pattern`` ("M" = Mamba2), Kimi-Linear's ``linear_attn_config.kda_layers`` or sglang's
    ``full_attention_interval`` rule; ``radix_with_spec`` is RADIX_WITH_SPEC's entry (None when unknown)."""
    facts = {"architecture": None, "model_type": None, "hybrid": None, "linear_attention": None, "layers": None,
             "linear_layers": None, "full_attention_interval": None, "mamba_ssm_dtype": None,
             "radix_with_spec": None, "error": None}  # fmt: skip
    try:
        cfg = json.loads(config_text)
    except ValueError as exc:
        facts["error"] = f"config.json is not JSON: {exc}"
        return facts
    if not isinstance(cfg, dict):
        facts["error"] = "config.json is not a JSON object"
        return facts
    text = cfg
    for key in ("text_config", "llm_config"):
        if isinstance(cfg.get(key), dict):
            text = cfg[key]
            break
    archs = cfg.get("architectures") or text.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    facts["architecture"] = arch
    facts["model_type"] = cfg.get("model_type")
    n = text.get("num_hidden_layers")
    facts["layers"] = n if isinstance(n, int) else None
    interval = text.get("full_attention_interval")
    facts["full_attention_interval"] = interval if isinstance(interval, int) else None
    facts["mamba_ssm_dtype"] = text.get("mamba_ssm_dtype") or cfg.get("mamba_ssm_dtype")
    facts["linear_layers"] = linear = _linear_layers(text, facts["layers"], facts["full_attention_interval"], arch)
    if arch == "GraniteMoeHybridForCausalLM":  # sglang: a hybrid only with "mamba" layers
        hybrid = bool(linear)
    else:
        hybrid = bool(linear) or arch in GATED_DELTANET_ARCHS or arch in MAMBA2_ARCHS or arch in OTHER_LINEAR_ARCHS
    facts["hybrid"] = hybrid
    if hybrid:
        if arch in GATED_DELTANET_ARCHS:
            facts["linear_attention"] = "gated_deltanet"
        elif arch in MAMBA2_ARCHS:
            facts["linear_attention"] = "mamba2"
        elif arch in OTHER_LINEAR_ARCHS:
            facts["linear_attention"] = OTHER_LINEAR_ARCHS[arch]
        else:  # an architecture not in sglang 0.5.11's tables: Gated DeltaNet's own config keys, or unknown
            facts["linear_attention"] = "gated_deltanet" if "linear_key_head_dim" in text else "other"
        facts["radix_with_spec"] = RADIX_WITH_SPEC.get(arch)
    return facts


def _linear_layers(text, layers, interval, arch):
    """How many layers are linear (recurrent state), by the first pattern the config gives."""
    types = text.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t in LINEAR_LAYER_TYPES)
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("M")
    linear_cfg = text.get("linear_attn_config")
    kda = linear_cfg.get("kda_layers") if isinstance(linear_cfg, dict) else None
    if isinstance(kda, list):
        return len(kda)
    if interval and layers:  # sglang derives the pattern from the interval
        return layers - layers // interval
    if arch == "FalconH1ForCausalLM" and layers:  # every layer runs attention and Mamba2 side by side
        return layers
    return 0


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


def strategy_values(args):
    return [v for flag in MAMBA_STRATEGY_FLAGS for v in flag_values(args, flag)]


def hybrid_instance_errors(inst, facts, sg):
    """[(field, message)] for what cannot work on this hybrid target with sglang ``sg``; [] if none (or not
    hybrid)."""
    if not facts or not facts.get("hybrid"):
        return []
    errors = []
    args = user_args(inst)
    algo = inst.get("algorithm")
    mode = (inst.get("ddtree") or {}).get("mode", "tree")
    arch = facts.get("architecture") or "this model"
    if algo == "DDTREE" and mode == "tree":
        kind = facts.get("linear_attention")
        if kind != "gated_deltanet":
            what = {"mamba2": "Mamba2", "kda": "Kimi Delta Attention", "lightning": "lightning attention"}.get(
                kind, "of another kind")
            errors.append(("ddtree.mode", (f"DDTREE tree verify on {arch}: its linear-attention layers are {what}, "
                                          "not Gated DeltaNet, the one kind whose tree verify (each node's state "
                                          "from its parent's) this toolkit's patches carry and have shown lossless; "
                                          "use ddtree.mode shadow-linear (verifies a chain), or algorithm "
                                          "DFLASH")))  # fmt: skip
        if not sg.gdn_tree_verify_with_flashinfer:
            for flag in LINEAR_BACKEND_FLAGS:
                if "flashinfer" in flag_values(args, flag):
                    errors.append(("extra_args", (f"{flag} flashinfer: in sglang {sg.version} FlashInfer's Gated "
                                                 "DeltaNet verify kernel cannot follow a tree, so DDTREE tree verify "
                                                 f"cannot run on {arch} with it; drop the flag (triton is sglang's "
                                                 "default) or set ddtree.mode shadow-linear")))  # fmt: skip
    if sg.mamba_radix_cache_auto:
        return errors  # sglang resolves the radix cache's mamba strategy itself (auto)
    radix = facts.get("radix_with_spec")
    strategy = strategy_values(args)
    if algo in ("DFLASH", "DDTREE") and "no_buffer" in strategy and "--disable-radix-cache" not in args \
            and radix in ("extra_buffer", "disable"):  # fmt: skip
        then = ("the toolkit then picks extra_buffer" if radix == "extra_buffer"
                else "the toolkit then turns the radix cache off")  # fmt: skip
        errors.append(("extra_args", (f"--mamba-scheduler-strategy no_buffer with the radix cache on: sglang "
                                     f"{sg.version} refuses speculative decoding on the hybrid {arch} then (ValueError "
                                     f"at start); drop the flag ({then}) or add --disable-radix-cache")))  # fmt: skip
    if "extra_buffer" in strategy and radix == "disable":
        errors.append(("extra_args", (f"--mamba-scheduler-strategy extra_buffer: sglang {sg.version} has no "
                                     f"extra_buffer mamba scheduling for {arch} (an AssertionError at start); drop "
                                     "the flag (speculative decoding then runs with --disable-radix-cache, which the "
                                     "toolkit adds)")))  # fmt: skip
    return errors


def _field_of(inst, flag, value):
    """pin_flags when the user pinned ``flag`` to ``value``, else extra_args."""
    pinned = (inst.get("pin_flags") or {}).get(flag)
    return "pin_flags" if pinned is not None and str(pinned) == str(value) else "extra_args"


def attention_backend_errors(inst, facts, sg):
    """[(field, message)] for attention backends sglang ``sg`` refuses on this target (any target)."""
    arch = (facts or {}).get("architecture")
    backends = flag_values(user_args(inst), "--attention-backend")
    errors = []
    for b in backends:
        if b not in sg.attention_backends:
            errors.append((_field_of(inst, "--attention-backend", b),
                           f"--attention-backend {b}: sglang {sg.version} accepts {either(sg.attention_backends)}"))
    if arch not in sg.no_triton_attention_archs:
        return errors
    tree_ok = [b for b in sg.tree_mask_attention_backends if b != "triton"]
    if "triton" in backends:
        errors.append((_field_of(inst, "--attention-backend", "triton"),
                       (f"--attention-backend triton: sglang {sg.version} refuses it on {arch} (its first "
                        "layer may not be an attention layer; an AssertionError at start); use "
                        f"{either(tree_ok)}")))
    elif inst.get("algorithm") == "DDTREE" and not set(tree_ok) & set(backends):
        errors.append(("pin_flags", (f"DDTREE's verify needs an attention backend that takes a tree mask "
                                    f"({either(sg.tree_mask_attention_backends)}) and sglang "
                                    f"{sg.version} refuses triton on {arch}: set pin_flags "
                                    f"{{'--attention-backend': {tree_ok[0]}}}")))
    return errors


def _flag_set(args, flag):
    """True when ``flag`` is given (a switch, or with a value other than false)."""
    vals = flag_values(args, flag)
    return flag in args or any(v.lower() not in ("false", "0") for v in vals)


# DDTREE's refusals at start (the patch series' ddtree_spec.handle_ddtree_args), by versions.yml's names:
# (name, flag, value or None for a switch, why)
DDTREE_FLAG_REFUSALS = (
    ("dp_attention", "--enable-dp-attention", None,
     "its commit reorders each request's KV slots on the rank that verified it"),
    ("rejection_sampling", "--speculative-use-rejection-sampling", None,
     "non-greedy requests are verified by sampling each tree slot from the target (lossless) instead"),
    ("adaptive", "--speculative-adaptive", None,
     "its verify width is budget + 1, fixed at start (the CUDA graphs are captured for it)"),
    ("extra_buffer_lazy", "--mamba-radix-cache-strategy", "extra_buffer_lazy",
     "as DFLASH: the lazy extra buffer has no DFlash commit; use extra_buffer"),
)


def _draft_head(draft_facts, heads):
    """What refused head a draft's config.json names (0.5.23's Domino / selector / LiLiCorr drafts), or None."""
    d = draft_facts or {}
    if d.get("architecture") in (heads.get("architectures") or ()):
        return f"architecture {d['architecture']}"
    cfg = heads.get("dflash_config") or {}
    if cfg.get("projector_type") and d.get("projector_type") == cfg["projector_type"]:
        return f"dflash_config.projector_type {d['projector_type']}"
    if d.get("selector_rank"):
        return f"dflash_config.selector_rank {d['selector_rank']} (a candidate selector)"
    if d.get("lilicorr"):
        return "dflash_config.lilicorr_* (a LiLiCorr head)"
    return None


def version_errors(inst, facts, sg, sm_majors=(), draft_facts=None):
    """[(field, message)] for what sglang ``sg`` refuses at start for this instance, from versions.yml's facts:
    Blackwell's attention backends for hybrid Gated DeltaNet targets (upstream sgl-project/sglang#35080), FlashInfer
    GDN kernels without a bfloat16 state on SM 10+, DFLASH's and DDTREE's own refusals, drafts DDTREE cannot use.
    ``sm_majors``: the SM majors of the instance's GPUs (the fingerprint); ``draft_facts``: the draft's config."""
    errors = []
    args = user_args(inst)
    algo = inst.get("algorithm")
    arch = (facts or {}).get("architecture") or "this model"
    gdn = (facts or {}).get("hybrid") and (facts or {}).get("linear_attention") == "gated_deltanet"
    backends = (flag_values(args, "--attention-backend") + flag_values(args, "--prefill-attention-backend")
                + flag_values(args, "--decode-attention-backend"))
    for major in sorted(set(sm_majors or ())):
        allowed = sg.blackwell_hybrid_gdn_attention(major)
        if not gdn or allowed is None:
            continue
        for b in backends:
            if b not in allowed:
                errors.append((_field_of(inst, "--attention-backend", b),
                               (f"--attention-backend {b}: sglang {sg.version} allows only {either(allowed)} attention "
                                f"for hybrid Gated DeltaNet models ({arch}) on SM {major}.x Blackwell GPUs (an "
                                "AssertionError at start: 'Only {...} backends are supported on Blackwell GPUs for "
                                f"hybrid GDN models'; sgl-project/sglang#35080); use {allowed[0]}")))
    if sg.gdn_flashinfer_needs_bf16_state and gdn and any(m >= 10 for m in sm_majors or ()):
        dtype = flag_values(args, "--mamba-ssm-dtype")
        fi = [f for f in ("--linear-attn-decode-backend", "--linear-attn-verify-backend", "--linear-attn-backend")
              if "flashinfer" in flag_values(args, f)]
        if fi and dtype and dtype[-1] != "bfloat16":
            errors.append((_field_of(inst, "--mamba-ssm-dtype", dtype[-1]),
                           (f"--mamba-ssm-dtype {dtype[-1]} with {fi[0]} flashinfer: sglang {sg.version} refuses "
                            "FlashInfer's Gated DeltaNet decode/verify on SM 10+ without a bfloat16 state (a "
                            "ValueError at start); drop --mamba-ssm-dtype (the toolkit then sets bfloat16) or the "
                            "flashinfer linear-attention backend")))
    if algo in ("DFLASH", "DDTREE") and "dp_attention" in sg.dflash_refuses and _flag_set(args, "--enable-dp-attention"):
        errors.append(("extra_args", (f"--enable-dp-attention: sglang {sg.version} refuses DFLASH (and so DDTREE) with "
                                     "dp attention at start; leave the flag out")))
    if algo == "DDTREE":
        for name, flag, value, why in DDTREE_FLAG_REFUSALS:
            if name not in sg.ddtree_refuses:
                continue
            hit = value in flag_values(args, flag) if value else _flag_set(args, flag)
            if hit and not (name == "dp_attention" and "dp_attention" in sg.dflash_refuses):
                shown = f"{flag} {value}" if value else flag
                errors.append((_field_of(inst, flag, value) if value else "extra_args",
                               f"{shown}: DDTREE on sglang {sg.version} refuses it at start ({why}); leave it out"))
        mode = (inst.get("ddtree") or {}).get("mode", "tree")
        if "linear_replayssm_tree" in sg.ddtree_refuses and mode == "tree" \
                and _flag_set(args, "--enable-linear-replayssm-spec"):  # fmt: skip
            errors.append(("extra_args", (f"--enable-linear-replayssm-spec: DDTREE tree mode on sglang {sg.version} "
                                         "refuses it at start (its ring commit replays a linear chain only); leave it "
                                         "out or set ddtree.mode shadow-linear")))
        pages = flag_values(args, "--page-size")
        if "page_size_over_1" in sg.ddtree_refuses and pages and pages[-1] not in ("1", "None"):
            errors.append((_field_of(inst, "--page-size", pages[-1]),
                           (f"--page-size {pages[-1]}: DDTREE supports page size 1 only (accepted tree nodes keep "
                            "their own KV slots); leave the flag out")))
        head = _draft_head(draft_facts, sg.ddtree_refused_draft_heads) if "draft_heads" in sg.ddtree_refuses else None
        if head:
            errors.append(("draft_model_path", (f"the draft's {head}: DDTREE takes a plain DFlash draft (top-k of its "
                                               "block's hidden states) and sglang "
                                               f"{sg.version}'s worker refuses this head at start; use algorithm "
                                               "DFLASH with this draft")))
    return errors
