"""Hybrid targets in the toolkit: config.json facts (module_utils/dflash_instances/model.py), what validation refuses
and the radix-cache rule (roles/dflash_instances/vars/main.yml: hybrid-spec-radix-extra-buffer)."""

import copy
import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.dflash_instances import host as di_host
from ansible.module_utils.dflash_instances import model as dm
from ansible.module_utils.dflash_instances import rules as di_rules
from ansible.module_utils.dflash_instances import validate as di_validate
from test_instances import CT200_FACTS, DRAFT, MODEL, good, validate
from test_rules import CT129, CT200, PROBE_GOOD, RULES, plan

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "gpu-harness"))
import make_models

LAB_HYBRID = (ROOT / "lab/models/Qwen3.6-27B/config.json").read_text()
LAB_DENSE = (ROOT / "lab/models/Qwen3-32B/config.json").read_text()
QWEN3_NEXT = json.dumps({"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 48,
                         "full_attention_interval": 4, "linear_key_head_dim": 128})  # fmt: skip
# other sglang 0.5.11 hybrids, in the shapes their published config.json files have: NemotronH's layer
# pattern string ("M" Mamba2, "*" attention, "-" MLP, "E" MoE), Falcon-H1's parallel attention + Mamba2
# in every layer, LFM2's "conv" layers, Granite 4.0's "mamba" layers, Kimi-Linear's KDA layer list
NEMOTRON_H = json.dumps({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                         "num_hidden_layers": 8, "hybrid_override_pattern": "M-M*M-M-", "mamba_num_heads": 64,
                         "ssm_state_size": 128, "conv_kernel": 4})  # fmt: skip
FALCON_H1 = json.dumps({"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "num_hidden_layers": 24,
                        "mamba_d_ssm": 1024, "mamba_n_heads": 16})  # fmt: skip
LFM2 = json.dumps({"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "num_hidden_layers": 6,
                   "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention"]})  # fmt: skip
GRANITE_H = json.dumps({"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
                        "num_hidden_layers": 4, "layer_types": ["mamba", "mamba", "mamba", "attention"]})  # fmt: skip
GRANITE_DENSE = json.dumps({"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
                            "num_hidden_layers": 2, "layer_types": ["attention", "attention"]})  # fmt: skip
KIMI_LINEAR = json.dumps({"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
                          "num_hidden_layers": 4,
                          "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]}})  # fmt: skip


def facts_with_target(text, path=MODEL):
    facts = copy.deepcopy(CT200_FACTS)
    facts["targets"] = {path: dm.target_facts(text)}
    return facts


def test_the_lab_target_is_the_seeds_hybrid():
    f = dm.target_facts(LAB_HYBRID)
    assert f["architecture"] == "Qwen3_5ForConditionalGeneration" and f["hybrid"] is True
    assert f["linear_attention"] == "gated_deltanet"
    assert (f["layers"], f["linear_layers"], f["full_attention_interval"]) == (64, 48, 4)
    assert f["mamba_ssm_dtype"] == "float32" and f["error"] is None
    d = dm.target_facts(LAB_DENSE)
    assert d["architecture"] == "Qwen3ForCausalLM" and d["hybrid"] is False and d["linear_attention"] is None


@pytest.mark.parametrize(("text", "arch", "hybrid", "linear", "kind", "radix"), [
    (QWEN3_NEXT, "Qwen3NextForCausalLM", True, 36, "gated_deltanet", "extra_buffer"),  # sglang's interval rule
    (json.dumps({"architectures": ["Qwen3_5ForCausalLM"], "num_hidden_layers": 8,
                 "layer_types": ["linear_attention"] * 3 + ["full_attention"]}), "Qwen3_5ForCausalLM", True, 3,
     "gated_deltanet", "extra_buffer"),
    (NEMOTRON_H, "NemotronHForCausalLM", True, 4, "mamba2", "disable"),
    (FALCON_H1, "FalconH1ForCausalLM", True, 24, "mamba2", "disable"),
    (LFM2, "Lfm2ForCausalLM", True, 4, "mamba2", "disable"),
    (GRANITE_H, "GraniteMoeHybridForCausalLM", True, 3, "mamba2", "disable"),
    (GRANITE_DENSE, "GraniteMoeHybridForCausalLM", False, 0, None, None),  # sglang: no mamba layer, no hybrid
    (KIMI_LINEAR, "KimiLinearForCausalLM", True, 3, "kda", "sglang"),
    (json.dumps({"architectures": ["SomeNewHybridForCausalLM"], "num_hidden_layers": 4,
                 "layer_types": ["mamba", "attention", "mamba", "mamba"]}), "SomeNewHybridForCausalLM", True, 3,
     "other", None),
])  # fmt: skip
def test_other_hybrids(text, arch, hybrid, linear, kind, radix):
    f = dm.target_facts(text)
    assert (f["architecture"], f["hybrid"], f["linear_layers"]) == (arch, hybrid, linear)
    assert (f["linear_attention"], f["radix_with_spec"]) == (kind, radix)


def test_the_linear_kind_comes_from_the_architecture_before_the_config_keys():
    kimi = json.loads(KIMI_LINEAR)
    kimi["linear_key_head_dim"] = 128  # a key Gated DeltaNet configs have; Kimi-Linear stays KDA
    assert dm.target_facts(json.dumps(kimi))["linear_attention"] == "kda"
    unknown = {"architectures": ["SomeNewGdnForCausalLM"], "num_hidden_layers": 4, "full_attention_interval": 4}
    assert dm.target_facts(json.dumps(unknown))["linear_attention"] == "other"
    assert dm.target_facts(json.dumps({**unknown, "linear_key_head_dim": 128}))["linear_attention"] == "gated_deltanet"


def test_a_vl_wrapper_is_read_through_its_language_config():
    text = json.dumps({"architectures": ["NemotronH_Nano_VL_V2"], "llm_config": json.loads(NEMOTRON_H)})
    f = dm.target_facts(text)
    assert (f["hybrid"], f["linear_layers"], f["linear_attention"]) == (True, 4, "mamba2")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_unreadable_config(text):
    assert dm.target_facts(text)["error"]


def test_the_scaled_down_gpu_hybrids_are_the_same_family():
    cfgs = make_models.model_configs((16,), ("hybrid", "hybrid-rw"))
    for name in ("hybrid", "hybrid-rw"):
        f = dm.target_facts(json.dumps(cfgs[name]))
        t = cfgs[name]["text_config"]
        assert f["hybrid"] and f["linear_attention"] == "gated_deltanet"
        assert t["layer_types"][3::4] == ["full_attention"] * (t["num_hidden_layers"] // 4)
        assert (t["head_dim"], t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"],
                t["attn_output_gate"], t["mamba_ssm_dtype"]) == (256, 128, 128, 4, True, "float32")  # fmt: skip


# ------------------------------------------------------------------ validation


def test_ddtree_tree_and_shadow_linear_on_the_hybrid_pass():
    facts = facts_with_target(LAB_HYBRID)
    for ddtree in ({"budget": 15, "topk": 8}, {"mode": "shadow-linear"}):
        assert validate([good(algorithm="DDTREE", ddtree=ddtree)], facts=facts) == []
    assert validate([good()], facts=facts) == []


@pytest.mark.parametrize(("inst", "field", "words"), [
    (good(algorithm="DDTREE", extra_args=["--linear-attn-decode-backend", "flashinfer"]), "extra_args",
     "FlashInfer's Gated DeltaNet verify kernel cannot follow a tree"),
    (good(algorithm="DDTREE", pin_flags={"--linear-attn-backend": "flashinfer"}), "extra_args",
     "--linear-attn-backend flashinfer"),
    (good(extra_args=["--mamba-scheduler-strategy", "no_buffer"]), "extra_args",
     "refuses speculative decoding on the hybrid Qwen3_5ForConditionalGeneration"),
])  # fmt: skip
def test_what_cannot_work_is_refused_naming_host_instance_field_and_remedy(inst, field, words):
    errors = validate([inst], facts=facts_with_target(LAB_HYBRID))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"ct200: instance 'dflash-gpu1': field '{field}'") and words in errors[0]
    assert "drop the flag" in errors[0]


def test_what_can_work_is_not_refused():
    facts = facts_with_target(LAB_HYBRID)
    ok = [
        good(algorithm="DDTREE", ddtree={"mode": "shadow-linear"}, extra_args=["--linear-attn-backend", "flashinfer"]),
        good(extra_args=["--mamba-scheduler-strategy", "no_buffer", "--disable-radix-cache"]),
        good(extra_args=["--disable-radix-cache"]),
    ]
    for inst in ok:
        assert validate([inst], facts=facts) == [], inst
    # the same flags on a dense target are sglang's business, not a hybrid refusal
    dense = facts_with_target(LAB_DENSE)
    assert validate([good(algorithm="DDTREE", extra_args=["--linear-attn-backend", "flashinfer"])], facts=dense) == []


def test_tree_mode_on_a_non_gated_deltanet_hybrid_is_refused():
    flashinfer = {"--attention-backend": "flashinfer"}
    unknown = json.dumps({"architectures": ["SomeNewHybridForCausalLM"], "layer_types": ["mamba", "attention"]})
    for text, what in ((NEMOTRON_H, "Mamba2"), (KIMI_LINEAR, "Kimi Delta Attention"), (FALCON_H1, "Mamba2"),
                       (unknown, "of another kind")):  # fmt: skip
        errors = validate([good(algorithm="DDTREE", pin_flags=flashinfer)], facts=facts_with_target(text))
        assert len(errors) == 1 and "field 'ddtree.mode'" in errors[0] and "shadow-linear" in errors[0], errors
        assert f"its linear-attention layers are {what}" in errors[0]
        assert validate([good(algorithm="DDTREE", pin_flags=flashinfer, ddtree={"mode": "shadow-linear"})],
                        facts=facts_with_target(text)) == []


@pytest.mark.parametrize(("text", "inst", "field", "words"), [
    (NEMOTRON_H, good(extra_args=["--mamba-scheduler-strategy", "extra_buffer"]), "extra_args",
     "no extra_buffer mamba scheduling for NemotronHForCausalLM"),
    (GRANITE_H, good(extra_args=["--mamba-scheduler-strategy", "no_buffer"]), "extra_args",
     "the toolkit then turns the radix cache off"),
    (LFM2, good(pin_flags={"--attention-backend": "triton"}), "pin_flags",
     "--attention-backend triton: sglang 0.5.11 refuses it on Lfm2ForCausalLM"),
    (LFM2, good(extra_args=["--attention-backend=triton"]), "extra_args", "use flashinfer"),
    (NEMOTRON_H, good(algorithm="DDTREE", ddtree={"mode": "shadow-linear"}), "pin_flags",
     "set pin_flags {'--attention-backend': flashinfer}"),
])  # fmt: skip
def test_what_sglang_refuses_on_other_hybrids_is_refused_before_the_host_changes(text, inst, field, words):
    errors = validate([inst], facts=facts_with_target(text))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"ct200: instance 'dflash-gpu1': field '{field}'") and words in errors[0]


def test_what_sglang_takes_on_other_hybrids_passes():
    for text, inst in ((NEMOTRON_H, good(extra_args=["--mamba-scheduler-strategy", "no_buffer",
                                                     "--disable-radix-cache"])),
                       (KIMI_LINEAR, good(extra_args=["--mamba-scheduler-strategy", "no_buffer"])),  # sglang: radix off
                       (LFM2, good(pin_flags={"--attention-backend": "flashinfer"})),
                       (FALCON_H1, good(pin_flags={"--attention-backend": "triton"}))):  # fmt: skip
        assert validate([inst], facts=facts_with_target(text)) == [], (text, inst)


def test_unreadable_target_config_is_an_error():
    errors = validate([good()], facts=facts_with_target("{"))
    assert errors and "field 'model_path': cannot read the target's config.json" in errors[0]


def test_gather_host_facts_reads_the_target_config(tmp_path):
    (tmp_path / "proc" / "net").mkdir(parents=True)
    (tmp_path / "proc" / "mounts").write_text("")
    model, staged = tmp_path / "m", tmp_path / "persistent"
    model.mkdir()
    staged.mkdir()
    (model / "config.json").write_text(LAB_HYBRID)
    (staged / "config.json").write_text(LAB_DENSE)
    hf = di_host.gather_host_facts([{"name": "a", "model_path": str(model)},
                               {"name": "b", "model_path": str(tmp_path / "absent"), "model_source": str(staged)}],
                              unit_dir=str(tmp_path), proc=str(tmp_path / "proc"))  # fmt: skip
    assert hf["targets"][str(model)]["hybrid"] is True
    assert hf["targets"][str(staged)]["hybrid"] is False  # the staged copy stands in for the absent model_path
    assert str(tmp_path / "absent") not in hf["targets"]


# ------------------------------------------------------------------ the rule


def rules_of(p):
    return {r["rule"]: r for r in p["applied"]}, {r["rule"]: r for r in p["skipped"]}


@pytest.mark.parametrize("algo", ["DFLASH", "DDTREE"])
def test_speculative_instances_on_a_hybrid_get_extra_buffer_with_the_reason(algo):
    hf = {"targets": {MODEL: dm.target_facts(LAB_HYBRID)}}
    p = plan(good(algorithm=algo, gpus=[0], port=30000), CT129, PROBE_GOOD, host_facts=hf)
    applied, _ = rules_of(p)
    rule = applied["hybrid-spec-radix-extra-buffer"]
    assert rule["flags"] == ["--mamba-scheduler-strategy", "extra_buffer"]
    assert "Qwen3_5ForConditionalGeneration is a hybrid target" in rule["reason"]
    i = p["args"].index("--mamba-scheduler-strategy")
    assert p["args"][i + 1] == "extra_buffer"


def test_the_rule_stands_down_without_radix_cache_or_speculation_or_on_dense():
    hf = {"targets": {MODEL: dm.target_facts(LAB_HYBRID)}}
    p = plan(good(extra_args=["--disable-radix-cache"]), CT200, PROBE_GOOD, host_facts=hf)
    applied, skipped = rules_of(p)
    assert "hybrid-spec-radix-extra-buffer" not in applied
    assert "radix cache is off" in skipped["hybrid-spec-radix-extra-buffer"]["reason"]
    assert "--mamba-scheduler-strategy" not in p["args"]
    p = plan(good(algorithm="NONE", draft_model_path=None), CT200, PROBE_GOOD, host_facts=hf)
    assert "hybrid-spec-radix-extra-buffer" not in rules_of(p)[0]
    p = plan(good(), CT200, PROBE_GOOD, host_facts={"targets": {MODEL: dm.target_facts(LAB_DENSE)}})
    assert "hybrid-spec-radix-extra-buffer" not in rules_of(p)[0]


@pytest.mark.parametrize("algo", ["DFLASH", "DDTREE"])
def test_hybrids_without_extra_buffer_get_the_radix_cache_off(algo):
    inst = good(algorithm=algo, gpus=[0], port=30000, pin_flags={"--attention-backend": "flashinfer"},
                ddtree={"mode": "shadow-linear"}) if algo == "DDTREE" else good(gpus=[0], port=30000)
    p = plan(inst, CT129, PROBE_GOOD, host_facts={"targets": {MODEL: dm.target_facts(NEMOTRON_H)}})
    applied, _ = rules_of(p)
    rule = applied["hybrid-spec-radix-off"]
    assert rule["flags"] == ["--disable-radix-cache"] and "no extra_buffer mamba scheduling" in rule["reason"]
    assert "hybrid-spec-radix-extra-buffer" not in applied and "--mamba-scheduler-strategy" not in p["args"]
    assert p["args"].count("--disable-radix-cache") == 1
    # set by the inventory itself: the rule stands down, the flag stays once
    p = plan(good(gpus=[0], port=30000, extra_args=["--disable-radix-cache"]), CT129, PROBE_GOOD,
             host_facts={"targets": {MODEL: dm.target_facts(NEMOTRON_H)}})
    assert "hybrid-spec-radix-off" not in rules_of(p)[0] and p["args"].count("--disable-radix-cache") == 1
    # sglang turns it off itself on Kimi-Linear; neither rule on the Qwen3.5 hybrid's side of the table
    for text, absent in ((KIMI_LINEAR, ("hybrid-spec-radix-off", "hybrid-spec-radix-extra-buffer")),
                         (LAB_HYBRID, ("hybrid-spec-radix-off",))):  # fmt: skip
        p = plan(good(gpus=[0], port=30000), CT129, PROBE_GOOD, host_facts={"targets": {MODEL: dm.target_facts(text)}})
        assert not set(absent) & set(rules_of(p)[0]), text


def test_unknown_target_facts_leave_the_rule_unevaluated():
    p = plan(good(), CT200, PROBE_GOOD, host_facts={})
    _, skipped = rules_of(p)
    assert "unknown" in skipped["hybrid-spec-radix-extra-buffer"]["reason"]
    assert di_rules.check_rules_table(RULES) == []


def test_draft_stays_valid_beside_the_hybrid():
    facts = facts_with_target(LAB_HYBRID)
    assert validate([good(algorithm="DDTREE", draft_model_path=DRAFT)], facts=facts) == []


def test_the_gpu_inventory_deploys_ddtree_b15_k8_on_the_hybrid(tmp_path):
    """inventory/gpu: what the lead's deploy.yml run on the H200 renders (models from make_models.py)."""
    import yaml
    from test_rules import H200

    inv = yaml.safe_load((ROOT / "inventory/gpu/group_vars/all/main.yml").read_text())
    [inst] = inv["dflash_instances"]
    paths = make_models.write_configs(str(tmp_path), (16,), ("hybrid",))
    target_cfg = Path(paths["hybrid"], "config.json").read_text()
    draft_cfg = Path(paths["hybrid-draft"], "config.json").read_text()
    facts = {"listeners": [], "paths": {p: {"exists": True, "isdir": True, "tmpfs": False}
                                        for p in (inst["model_path"], inst["draft_model_path"])},
             "drafts": {inst["draft_model_path"]: dict(zip(("block_size", "block_size_source", "error"),
                                                           di_host.draft_block_size(draft_cfg), strict=True))},
             "targets": {inst["model_path"]: dm.target_facts(target_cfg)}}  # fmt: skip
    assert di_validate.validate_instances("localhost", [inst], H200, facts, [r["name"] for r in RULES]) == []
    probe = {**PROBE_GOOD, "sgl_kernel": {"fa3": False}}
    p = plan(inst, H200, probe, host_facts=facts)
    args = " ".join(p["args"])
    assert "--speculative-algorithm DDTREE" in args and "--speculative-ddtree-budget 15" in args
    assert "--speculative-ddtree-topk 8" in args and "--mamba-scheduler-strategy extra_buffer" in args
    assert p["args"][p["args"].index("--attention-backend") + 1] == "triton"  # the pin beats sm90-without-fa3


def test_ddtree_on_a_hybrid_says_how_its_state_is_kept():
    """The rule added in one place (roles/dflash_instances/vars/main.yml) as README's demonstration:
    informational (no flag, no warning, now that the H200 records show it lossless in float32)."""
    hybrid = {"targets": {MODEL: dm.target_facts(LAB_HYBRID)}}
    p = plan(good(algorithm="DDTREE", gpus=[0], port=30000), CT129, PROBE_GOOD, host_facts=hybrid)
    rule = rules_of(p)[0]["hybrid-target-tree-verify-per-node-state"]
    assert "warn" not in rule and rule["flags"] == []
    assert "DDTREE on Qwen3_5ForConditionalGeneration, a hybrid target" in rule["reason"]
    assert "commits only the accepted node's" in rule["reason"] and "Shown lossless" in rule["reason"]
    for algo, facts in (("DFLASH", hybrid), ("DDTREE", {"targets": {MODEL: dm.target_facts(LAB_DENSE)}})):
        p = plan(good(algorithm=algo, gpus=[0], port=30000), CT129, PROBE_GOOD, host_facts=facts)
        assert "hybrid-target-tree-verify-per-node-state" not in rules_of(p)[0]
    assert di_rules.check_rules_table(RULES) == []
