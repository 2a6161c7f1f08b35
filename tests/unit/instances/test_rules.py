"""The fallback rules table (roles/dflash_instances/vars/main.yml) evaluated on the seeds' hosts."""

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_common.argv import split_flags
from ansible.module_utils.dflash_instances import flags as di_flags
from ansible.module_utils.dflash_instances import rules as di_rules

ROOT = Path(__file__).resolve().parents[3]
RULES = yaml.safe_load((ROOT / "roles/dflash_instances/vars/main.yml").read_text())["__dflash_instances_rules"]


def gpu(index, sm, name, used=0, procs=()):
    return {"index": index, "name": name, "sm": sm, "memory_total_mib": 97887, "memory_used_mib": used,
            "processes": list(procs), "healthy": True, "problem": None}


# Mirrors lab/captures/ct200 (fingerprint schema of docs/design.md)
CT200 = {
    "gpu_count": 8,
    "gpus": [gpu(i, "12.0", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 60627 if i == 0 else 0,
                 [{"pid": 2381466, "name": "/root/venv/bin/python3", "used_mib": 60616}] if i == 0 else [])
             for i in range(8)],
    "driver_version": "580.95.05", "driver_cuda_version": "13.0",
    "cuda_toolkits": [{"path": "/usr/local/cuda-12.8", "version": "12.8"}], "nvcc_version": "12.8",
    "torch": {"version": "2.11.0+cu128", "cuda": "12.8", "available": True},
}
# Mirrors lab/captures/ct129
CT129 = {
    "gpu_count": 2,
    "gpus": [gpu(i, "8.6", "NVIDIA RTX A6000") for i in range(2)],
    "driver_version": "580.82.09", "driver_cuda_version": "13.0",
    "cuda_toolkits": [{"path": "/usr/local/cuda-13.0", "version": "13.0"}], "nvcc_version": "13.0",
    "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "available": True},
}
H200 = {
    "gpu_count": 1, "gpus": [gpu(0, "9.0", "NVIDIA H200")], "driver_version": "580.159.04",
    "driver_cuda_version": "13.0", "cuda_toolkits": [{"path": "/usr/local/cuda", "version": "13.0"}],
    "nvcc_version": "13.0", "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "available": True},
}
# The seeds' CT200 venv: xgrammar 0.1.10 (no StructuralTag)
PROBE_SEED_CT200 = {"torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"},
                    "flashinfer": {"ok": True, "version": "0.6.8.post1"},
                    "xgrammar": {"ok": True, "version": "0.1.10", "structural_tag": False}}
PROBE_GOOD = {"torch": {"ok": True, "version": "2.11.0+cu130", "cuda": "13.0"},
              "flashinfer": {"ok": True, "version": "0.6.8.post1"},
              "xgrammar": {"ok": True, "version": "0.1.32", "structural_tag": True}}


def inst(**kw):
    base = {"name": "dflash-gpu1", "gpus": [1], "port": 30001, "algorithm": "DFLASH",
            "model_path": "/dev/shm/Qwen3.6-27B", "draft_model_path": "/dev/shm/Qwen3.6-27B-DFlash"}
    base.update(kw)
    return base


def plan(instance, fp, probe, host_facts=None, **kw):
    return di_flags.plan_instance(instance, RULES, fp, probe, host_facts or {}, {"path": "/opt/dflash/trees/t"}, **kw)


def applied_names(p):
    return [a["rule"] for a in p["applied"]]


def test_table_is_well_formed():
    assert di_rules.check_rules_table(RULES) == []
    names = [r["name"] for r in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.get("reason"), rule["name"]


def test_ct200_gets_triton_and_grammar_none_with_reasons():
    p = plan(inst(), CT200, PROBE_SEED_CT200)
    names = applied_names(p)
    assert "sm12x-flashinfer-needs-cuda-12.9" in names
    assert "sm12x-draft-attention-triton" in names
    assert "xgrammar-without-structuraltag" in names
    args = p["args"]
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert args[args.index("--attention-backend") + 1] == "triton"
    assert args[args.index("--speculative-draft-attention-backend") + 1] == "triton"
    assert args[args.index("--sampling-backend") + 1] == "pytorch"
    assert args[args.index("--grammar-backend") + 1] == "none"
    assert pairs["--model-path"] == "/dev/shm/Qwen3.6-27B"
    by = {a["rule"]: a for a in p["applied"]}
    sm12 = by["sm12x-flashinfer-needs-cuda-12.9"]
    assert "SM 12.0" in sm12["reason"] and "12.8" in sm12["reason"] and "12.9" in sm12["reason"]
    assert "nvidia-cuda-nvcc" in sm12["prefer"]
    assert "0.1.10" in by["xgrammar-without-structuraltag"]["reason"]
    assert "0.1.32" in by["xgrammar-without-structuraltag"]["prefer"]
    # the model sits on tmpfs without a persistent source: a warning, no flags
    assert by["model-on-tmpfs-unstaged"]["warn"] is True and by["model-on-tmpfs-unstaged"]["flags"] == []


def test_ct129_sm86_gets_no_fallback_flags():
    p = plan(inst(gpus=[0], port=30000, model_path="/data/Qwen3.6-27B"), CT129, PROBE_GOOD)
    assert p["applied"] == []
    flags = split_flags(p["args"])
    for f in ("--attention-backend", "--sampling-backend", "--grammar-backend",
              "--speculative-draft-attention-backend"):
        assert f not in flags
    reasons = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert "gpu.sm_major=[8]" in reasons["sm12x-flashinfer-needs-cuda-12.9"]


def test_overlay_nvcc_removes_the_cause_and_points_flashinfer_at_it():
    hf = {"overlay": {"nvcc": {"path": "/L/site-packages/nvidia/cu13/bin/nvcc", "home": "/L/site-packages/nvidia/cu13",
                               "version": "13.0"},
                      "nvidia_lib_dirs": ["/L/site-packages/nvidia/cu13/lib"]}}
    p = plan(inst(), CT200, PROBE_GOOD, hf)
    names = applied_names(p)
    assert "sm12x-flashinfer-needs-cuda-12.9" not in names
    assert "flashinfer-jit-cuda-home" in names
    assert p["env"]["CUDA_HOME"] == "/L/site-packages/nvidia/cu13"
    assert p["env"]["LD_LIBRARY_PATH"] == "/L/site-packages/nvidia/cu13/lib"
    removed = {s["rule"]: s["reason"] for s in p["removed_cause"]}
    assert "13.0" in removed["sm12x-flashinfer-needs-cuda-12.9"]
    assert "/L/site-packages/nvidia/cu13" in removed["sm12x-flashinfer-needs-cuda-12.9"]
    assert "--attention-backend" not in p["args"]


def test_host_toolkit_129_keeps_flashinfer():
    fp = dict(CT200, cuda_toolkits=[{"path": "/usr/local/cuda", "version": "12.9"}], nvcc_version="12.9")
    p = plan(inst(), fp, PROBE_GOOD)
    assert "sm12x-flashinfer-needs-cuda-12.9" not in applied_names(p)
    assert "flashinfer-jit-cuda-home" not in applied_names(p)  # FlashInfer finds /usr/local/cuda itself


def test_no_nvcc_at_all_on_sm12_falls_back():
    fp = dict(CT200, cuda_toolkits=[], nvcc_version=None)
    p = plan(inst(), fp, PROBE_GOOD)
    assert "sm12x-flashinfer-needs-cuda-12.9" in applied_names(p)


def test_draft_rule_only_for_speculative_instances():
    p = plan(inst(algorithm="NONE", draft_model_path=None), CT200, PROBE_GOOD)
    names = applied_names(p)
    assert "sm12x-flashinfer-needs-cuda-12.9" in names
    assert "sm12x-draft-attention-triton" not in names
    assert "--speculative-draft-attention-backend" not in p["args"]
    assert "--speculative-algorithm" not in p["args"]


def test_unknown_probe_is_not_evaluated_and_says_so():
    p = plan(inst(), CT200, None)
    reasons = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert reasons["xgrammar-without-structuraltag"].startswith("not evaluated: xgrammar.structural_tag")
    assert "--grammar-backend" not in p["args"]


def test_xgrammar_import_error_naming_structuraltag():
    probe = dict(PROBE_GOOD, xgrammar={"ok": False, "error": "ImportError: cannot import name 'StructuralTag'"})
    assert "xgrammar-without-structuraltag" in applied_names(plan(inst(), CT129, probe))


def test_xgrammar_not_installed():
    probe = dict(PROBE_GOOD, xgrammar={"ok": False, "error": "ModuleNotFoundError: No module named 'xgrammar'"})
    p = plan(inst(gpus=[0], model_path="/data/m"), CT129, probe)
    assert applied_names(p) == ["xgrammar-missing"]
    assert "No module named 'xgrammar'" in p["applied"][0]["reason"]
    # without torch nothing of sglang runs: the missing xgrammar is not the cause to work around
    probe["torch"] = {"ok": False, "error": "ModuleNotFoundError: No module named 'torch'"}
    assert plan(inst(gpus=[0], model_path="/data/m"), CT129, probe)["applied"] == []


def test_user_pin_wins_and_disabled_rule():
    p = plan(inst(pin_flags={"--attention-backend": "flashinfer"}), CT200, PROBE_SEED_CT200)
    args = p["args"]
    assert args.count("--attention-backend") == 1
    assert args[args.index("--attention-backend") + 1] == "flashinfer"
    by = {a["rule"]: a for a in p["applied"]}
    assert by["sm12x-flashinfer-needs-cuda-12.9"]["overridden_by_user"] == ["--attention-backend"]
    assert by["sm12x-flashinfer-needs-cuda-12.9"]["flags"] == ["--sampling-backend", "pytorch"]

    p = plan(inst(disabled_rules=["xgrammar-without-structuraltag"]), CT200, PROBE_SEED_CT200)
    assert "--grammar-backend" not in p["args"]
    assert {"rule": "xgrammar-without-structuraltag",
            "reason": "switched off by the inventory (disabled_rules)"} in p["skipped"]
    p = plan(inst(), CT200, PROBE_SEED_CT200, host_disabled=["xgrammar-without-structuraltag"])
    assert "--grammar-backend" not in p["args"]


def test_extra_args_flag_wins_over_rule_entirely():
    p = plan(inst(extra_args=["--grammar-backend", "llguidance"]), CT200, PROBE_SEED_CT200)
    assert p["args"].count("--grammar-backend") == 1
    assert p["args"][-2:] == ["--grammar-backend", "llguidance"]
    reasons = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert "--grammar-backend" in reasons["xgrammar-without-structuraltag"]


def test_sm90_without_fa3_gets_explicit_backend():
    probe = dict(PROBE_GOOD, sgl_kernel={"ok": True, "fa3": False})
    p = plan(inst(gpus=[0], model_path="/data/m"), H200, probe)
    assert applied_names(p) == ["sm90-without-fa3"]
    assert p["args"][p["args"].index("--attention-backend") + 1] == "flashinfer"
    # a probe that does not say whether FA3 is there: nothing is added
    assert plan(inst(gpus=[0], model_path="/data/m"), H200, PROBE_GOOD)["applied"] == []


def test_sm90_fa3_from_the_sgl_kernel_files(tmp_path):
    from ansible.module_utils.dflash_instances import host as d_host
    pkg = tmp_path / "site-packages" / "sgl_kernel"
    (pkg / "sm90").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sm90" / "common_ops.abi3.so").write_text("")
    hf = {"sgl_kernel": d_host.sgl_kernel_facts(str(pkg / "__init__.py"))}
    assert hf["sgl_kernel"]["fa3"] is False  # the GPU bundle strips flash_ops.abi3.so
    p = plan(inst(gpus=[0], model_path="/data/m"), H200, PROBE_GOOD, hf)
    assert applied_names(p) == ["sm90-without-fa3"]
    (pkg / "flash_ops.abi3.so").write_text("")
    hf = {"sgl_kernel": d_host.sgl_kernel_facts(str(pkg / "__init__.py"))}
    assert hf["sgl_kernel"]["fa3"] is True
    assert plan(inst(gpus=[0], model_path="/data/m"), H200, PROBE_GOOD, hf)["applied"] == []


def test_ddtree_on_hopper_gets_the_triton_attention_its_tree_verify_needs():
    """sglang 0.5.11 defaults to FA3 on Hopper without EAGLE top-k, and DDTREE refuses FA3 at start."""
    dd = {"algorithm": "DDTREE", "gpus": [0], "model_path": "/data/m"}
    for fa3 in (True, False):
        probe = dict(PROBE_GOOD, sgl_kernel={"ok": True, "fa3": fa3})
        p = plan(inst(**dd), H200, probe)
        assert applied_names(p) == ["tree-verify-attention-triton"], fa3  # sm90-without-fa3 leaves DDTREE alone
        assert p["args"].count("--attention-backend") == 1
        assert p["args"][p["args"].index("--attention-backend") + 1] == "triton"
        # the reason names what sglang accepts from the one source the validation and the diagnosis read
        assert "refuses fa3 at start" in p["applied"][0]["reason"]
        assert "in sglang 0.5.11 only the triton or flashinfer backends do" in p["applied"][0]["reason"]
    # the inventory's own choice wins; flashinfer broken: its rule already says triton, once
    p = plan(inst(**dd, pin_flags={"--attention-backend": "flashinfer"}), H200, PROBE_GOOD)
    assert "tree-verify-attention-triton" not in applied_names(p)
    assert p["args"][p["args"].index("--attention-backend") + 1] == "flashinfer"
    probe = dict(PROBE_GOOD, flashinfer={"ok": False, "error": "ImportError: libcudart.so.13"})
    p = plan(inst(**dd), H200, probe)
    assert applied_names(p) == ["flashinfer-unusable-triton"] and p["args"].count("--attention-backend") == 1
    # DFLASH on Hopper, and DDTREE where sglang's default takes a tree mask (SM 8.x/12.x: FlashInfer): no rule
    assert plan(inst(gpus=[0], model_path="/data/m"), H200, PROBE_GOOD)["applied"] == []
    assert "tree-verify-attention-triton" not in applied_names(plan(inst(algorithm="DDTREE"), CT129, PROBE_GOOD))


def test_flashinfer_broken_but_torch_ok():
    probe = dict(PROBE_GOOD, flashinfer={"ok": False, "error": "ImportError: libcudart.so.13"})
    p = plan(inst(gpus=[0], model_path="/data/m"), CT129, probe)
    assert applied_names(p) == ["flashinfer-unusable-triton"]
    # without a working torch the probe says nothing about FlashInfer itself
    probe = dict(probe, torch={"ok": False, "error": "No module named 'torch'"})
    assert plan(inst(gpus=[0], model_path="/data/m"), CT129, probe)["applied"] == []


def test_ddtree_budget_is_not_a_rule_but_a_validation_error():
    """budget + 1 above the draft block is refused by the validator (test_instances.py), not warned."""
    assert not any("ddtree" in r["name"] for r in RULES)
    hf = {"drafts": {"/dev/shm/Qwen3.6-27B-DFlash": {"block_size": 32,
                                                    "block_size_source": "config.json dflash_config.block_size"}}}
    p = plan(inst(algorithm="DDTREE", ddtree={"budget": 31}, model_path="/data/m"), CT129, PROBE_GOOD, hf)
    assert p["applied"] == []
    assert p["args"][p["args"].index("--speculative-ddtree-budget") + 1] == "31"
    ctx = di_rules.rule_context(inst(algorithm="DDTREE", ddtree={"budget": 31}, model_path="/data/m"), CT129,
                          PROBE_GOOD, hf)
    assert (ctx["instance.block_size"], ctx["instance.ddtree_verify_tokens"]) == (32, 32)


def test_staged_model_is_information_not_warning():
    p = plan(inst(model_source="/data/models/Qwen3.6-27B"), CT200, PROBE_GOOD)
    by = {a["rule"]: a for a in p["applied"]}
    assert "model-on-tmpfs-unstaged" not in by
    assert "dflash-stage-dflash-gpu1.service" in by["model-on-tmpfs-staged"]["reason"]


@pytest.mark.parametrize(("cond", "ctx", "want"), [
    ({"fact": "a.b", "version_lt": "12.9"}, {"a.b": "12.8"}, True),
    ({"fact": "a.b", "version_lt": "12.9"}, {"a.b": "13.0"}, False),
    ({"fact": "a.b", "version_ge": "12.9"}, {"a.b": None}, None),
    ({"fact": "a.b", "contains": 12}, {"a.b": [8, 12]}, True),
    ({"fact": "a.b", "is": False}, {"a.b": None}, None),
    ({"fact": "a.b", "set": False}, {"a.b": None}, True),
    ({"all": [{"fact": "a.b", "eq": 1}, {"fact": "a.c", "eq": 2}]}, {"a.b": 1, "a.c": None}, None),
    ({"all": [{"fact": "a.b", "eq": 2}, {"fact": "a.c", "eq": 2}]}, {"a.b": 1, "a.c": None}, False),
    ({"any": [{"fact": "a.b", "eq": 1}, {"fact": "a.c", "eq": 2}]}, {"a.b": 1, "a.c": None}, True),
    ({"not": {"fact": "a.b", "in": [1, 2]}}, {"a.b": 3}, True),
])
def test_condition_language(cond, ctx, want):
    assert di_rules.eval_condition(cond, ctx)[0] is want


def test_condition_language_rejects_typos():
    with pytest.raises(ValueError, match="unknown fact 'gpu.smm'"):
        di_rules.eval_condition({"fact": "gpu.smm", "eq": 1}, {"gpu.sm": []})
    with pytest.raises(ValueError, match="exactly one of"):
        di_rules.eval_condition({"fact": "gpu.sm", "eq": 1, "ne": 2}, {"gpu.sm": []})
    assert di_rules.check_rules_table([{"name": "x", "reason": "r", "when": {"fact": "nope", "eq": 1}}])


# --- real parser output: the lab captures and the H200 capture + probe from the GPU machine ---

def _replay(path):
    from ansible.module_utils.dflash_fingerprint import collect, merge
    return merge.fingerprint_from_raw(collect.read_capture(str(ROOT / path)))


def test_ct200_lab_capture_through_the_real_parser():
    fp = _replay("lab/captures/ct200")
    p = plan(inst(), fp, PROBE_SEED_CT200)
    names = applied_names(p)
    assert names[:3] == ["sm12x-flashinfer-needs-cuda-12.9", "sm12x-draft-attention-triton",
                         "xgrammar-without-structuraltag"]
    assert "CUDA it finds is 12.8" in p["applied"][0]["reason"]


def test_ct129_lab_capture_through_the_real_parser():
    fp = _replay("lab/captures/ct129")
    p = plan(inst(gpus=[0], model_path="/data/m"), fp, PROBE_GOOD)
    assert p["applied"] == []


def test_h200_real_capture_and_probe_get_no_fallbacks():
    import json
    fp = _replay("tests/fixtures/captures/h200")
    probe = json.loads((ROOT / "tests/fixtures/probe/h200.json").read_text())["probe"]
    assert probe["xgrammar"]["structural_tag"] is True
    p = plan(inst(gpus=[0], model_path="/data/m"), fp, probe)
    assert p["applied"] == []
    reasons = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert "gpu.sm_major=[9]" in reasons["sm12x-flashinfer-needs-cuda-12.9"]
    assert reasons["xgrammar-without-structuraltag"] == "condition not met: xgrammar.structural_tag=True"
