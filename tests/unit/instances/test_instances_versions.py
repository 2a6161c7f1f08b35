"""sglang versions in the instances stage: the host's dflash_sglang_version and an instance's own sglang_version
choose the flag table, the validation's refusals, the fallback rules (each row's version range) and the runtime
(venv, tree, probe) an instance gets; an unknown version is refused in words listing the supported ones."""

import copy
import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_instances import flags as di_flags
from ansible.module_utils.dflash_instances import host as di_host
from ansible.module_utils.dflash_instances import model as dm
from ansible.module_utils.dflash_instances import rules as di_rules
from ansible.module_utils.dflash_instances.server_flags import load_flags
from test_instances import CT200_FACTS, DRAFT, MODEL, RULE_NAMES, good, validate
from test_rules import CT200, H200, PROBE_GOOD, RULES, gpu

ROOT = Path(__file__).resolve().parents[3]
PATCHES = ROOT / "files" / "patches" / "sglang"
LAB_TARGET = (ROOT / "lab" / "models" / "Qwen3.6-27B" / "config.json").read_text()
FLAGS = {v: load_flags(str(PATCHES / v / "server-flags.txt"))[0] for v in sglang.supported()}
B200 = {"gpu_count": 1, "gpus": [gpu(0, "10.0", "NVIDIA B200")], "driver_version": "580.95.05",
        "driver_cuda_version": "13.0", "cuda_toolkits": [{"path": "/usr/local/cuda", "version": "13.0"}],
        "nvcc_version": "13.0"}


def hybrid_facts(facts=CT200_FACTS):
    out = copy.deepcopy(facts)
    out["targets"] = {MODEL: dm.target_facts(LAB_TARGET)}
    return out


def check(instances, host_version="0.5.11", fp=CT200, facts=None, **kw):
    others = {v: FLAGS[v] for v in sglang.supported() if v != host_version}
    return validate(instances, fp=fp, facts=facts or hybrid_facts(), server_flags=FLAGS[host_version],
                    sglang_version=host_version, server_flags_by_version=others, **kw)


def filters():
    spec = importlib.util.spec_from_file_location("f", ROOT / "filter_plugins/dflash_instances.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()


def test_an_unknown_version_is_refused_listing_the_supported_ones():
    errs = check([good(sglang_version="0.5.14")])
    assert errs == [("ct200: instance 'dflash-gpu1': field 'sglang_version': sglang '0.5.14' is not a version this "
                    "toolkit supports (supported: 0.5.11, 0.5.17, 0.5.23; each has its folder "
                    "files/patches/sglang/<version>/ with its wheels, patch series and flag table)")]
    assert "must be a version string" in check([good(sglang_version=0.5)])[0]
    f = filters()
    host = f["dflash_instances_errors"]([good()], "ct200", CT200, hybrid_facts(), RULES, sglang_version="0.6.0")
    assert host[0].startswith("ct200: field 'dflash_sglang_version': sglang '0.6.0' is not a version")


def test_the_python_floor_of_a_version():
    errs = check([good(sglang_version="0.5.23")], python_tag="cp310")
    assert len(errs) == 1 and "sglang 0.5.23 has no wheel for cp310 (its wheels: cp311, cp312, cp313" in errs[0]
    assert check([good(sglang_version="0.5.23")], python_tag="cp312") == []


def test_flags_are_checked_against_the_instances_own_version():
    new = ["--mamba-radix-cache-strategy", "extra_buffer"]
    assert any("'--mamba-radix-cache-strategy' is not a flag of sglang 0.5.11" in e
               for e in check([good(extra_args=new)]))
    assert check([good(extra_args=new, sglang_version="0.5.17")]) == []
    old = ["--mamba-scheduler-strategy", "extra_buffer"]
    assert check([good(extra_args=old, sglang_version="0.5.17")]) == []  # a deprecated alias there
    assert any("'--mamba-scheduler-strategy' is not a flag of sglang 0.5.23" in e
               for e in check([good(extra_args=old, sglang_version="0.5.23")]))
    # the host's version decides for instances without their own
    assert check([good(extra_args=new)], host_version="0.5.17") == []


def test_the_filter_loads_each_versions_flag_table():
    f = filters()
    errs = f["dflash_instances_errors"](
        [good(extra_args=["--mamba-radix-cache-strategy", "extra_buffer"], sglang_version="0.5.23")], "ct200", CT200,
        hybrid_facts(), RULES, server_flags_file=str(PATCHES / "0.5.11" / "server-flags.txt"),
        sglang_version="0.5.11", server_flags_dir=str(PATCHES))
    assert errs == []
    errs = f["dflash_instances_errors"](
        [good(extra_args=["--mamba-scheduler-strategy", "extra_buffer"], sglang_version="0.5.23")], "ct200", CT200,
        hybrid_facts(), RULES, server_flags_file=str(PATCHES / "0.5.11" / "server-flags.txt"),
        sglang_version="0.5.11", server_flags_dir=str(PATCHES))
    assert len(errs) == 1 and "not a flag of sglang 0.5.23" in errs[0]
    assert f["dflash_sglang_versions"]([good(), good(name="b", sglang_version="0.5.17"), good(name="c"),
                                        good(name="d", sglang_version="0.5.99")], "0.5.11") == ["0.5.11", "0.5.17"]
    assert f["dflash_sglang_versions"]([], None) == [sglang.default_version()]
    assert set(f["dflash_sglang_host_facts"]()) == set(sglang.supported())


def test_blackwell_hybrid_gdn_backends_by_version():
    """The lab's ct200 is SM 12.0 and serves a Qwen3.5-class hybrid: fa4 passes 0.5.11's check (any Blackwell) and is
    refused by 0.5.17's (SM 12: triton, trtllm_mha, flashinfer; sgl-project/sglang#35080), before any change."""
    fa4 = good(pin_flags={"--attention-backend": "fa4"})
    assert check([fa4]) == []
    errs = check([dict(fa4, sglang_version="0.5.17")])
    assert errs == [("ct200: instance 'dflash-gpu1': field 'pin_flags': --attention-backend fa4: sglang 0.5.17 allows "
                    "only triton, trtllm_mha or flashinfer attention for hybrid Gated DeltaNet models "
                    "(Qwen3_5ForConditionalGeneration) on SM 12.x Blackwell GPUs (an AssertionError at start: 'Only "
                    "{...} backends are supported on Blackwell GPUs for hybrid GDN models'; sgl-project/sglang#35080); "
                    "use triton")]
    assert check([dict(fa4, sglang_version="0.5.23")])  # SM 12: still no fa4
    fi = good(pin_flags={"--attention-backend": "flashinfer"}, gpus=[0])
    b200 = {**hybrid_facts(), "listeners": []}
    assert check([dict(fi, sglang_version="0.5.17")], fp=B200, facts=b200)  # SM 10: FlashInfer refused in 0.5.17
    assert check([dict(fi, sglang_version="0.5.23")], fp=B200, facts=b200) == []  # allowed again in 0.5.23
    assert check([dict(fi, gpus=[1])]) == []  # 0.5.11, SM 12


def test_ddtree_refusals_new_in_0_5_17():
    dd = good(algorithm="DDTREE", ddtree={"budget": 15, "topk": 8})
    for flag, value in (("--speculative-use-rejection-sampling", None), ("--speculative-adaptive", None),
                        ("--mamba-radix-cache-strategy", "extra_buffer_lazy")):
        args = [flag] + ([value] if value else [])
        errs = check([dict(dd, extra_args=args, sglang_version="0.5.17")])
        assert len(errs) == 1 and "DDTREE on sglang 0.5.17 refuses it at start" in errs[0], (flag, errs)
    # dp attention: 0.5.17 refuses it for DFLASH (and so DDTREE), 0.5.23 serves DFLASH with it but not DDTREE
    dp = ["--enable-dp-attention"]
    assert "sglang 0.5.17 refuses DFLASH (and so DDTREE)" in check([dict(dd, extra_args=dp, sglang_version="0.5.17")])[0]
    assert check([good(extra_args=dp, sglang_version="0.5.23")]) == []
    assert "DDTREE on sglang 0.5.23 refuses it" in check([dict(dd, extra_args=dp, sglang_version="0.5.23")])[0]
    # the ring commit of linear ReplaySSM: tree mode only
    rep = ["--enable-linear-replayssm-spec"]
    assert "DDTREE tree mode on sglang 0.5.17" in check([dict(dd, extra_args=rep, sglang_version="0.5.17")])[0]
    shadow = dict(dd, ddtree={"budget": 15, "topk": 8, "mode": "shadow-linear"}, extra_args=rep, sglang_version="0.5.17")
    assert check([shadow]) == []
    assert "page size 1 only" in check([dict(dd, extra_args=["--page-size", "64"], sglang_version="0.5.17")])[0]


@pytest.mark.parametrize(("config", "what"), [
    ({"architectures": ["DFlash2DraftModel"], "dflash_config": {"selector_rank": 64, "selector_top_k": 8}},
     "architecture DFlash2DraftModel"),
    ({"architectures": ["DFlashDraftModel"], "dflash_config": {"projector_type": "domino"}},
     "dflash_config.projector_type domino"),
    ({"architectures": ["DFlashDraftModel"], "dflash_config": {"lilicorr_num_layers": 2}}, "LiLiCorr head"),
])
def test_0_5_23_ddtree_refuses_domino_selector_and_lilicorr_drafts(config, what):
    facts = hybrid_facts()
    facts["drafts"][DRAFT] = dict(di_host.draft_head(json.dumps(config)), block_size=16,
                                  block_size_source="config.json block_size", error=None)
    dd = good(algorithm="DDTREE", sglang_version="0.5.23")
    errs = check([dd], facts=facts)
    assert len(errs) == 1 and "field 'draft_model_path'" in errs[0] and what in errs[0], errs
    assert check([dict(dd, algorithm="DFLASH")], facts=facts) == []
    assert check([dict(dd, sglang_version="0.5.17")], facts=facts) == []  # 0.5.17 has no such heads
    # a plain draft
    assert di_host.draft_head(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 16})) == {
        "architecture": "DFlashDraftModel", "projector_type": None, "selector_rank": None, "lilicorr": False}


def test_the_lab_draft_is_a_plain_dflash_draft():
    text = (ROOT / "lab" / "models" / "Qwen3.6-27B-DFlash" / "config.json").read_text()
    assert dm._draft_head(di_host.draft_head(text), sglang.facts("0.5.23").ddtree_refused_draft_heads) is None


def plan(instance, fp=CT200, probe=PROBE_GOOD, host_facts=None, **kw):
    hf = host_facts if host_facts is not None else hybrid_facts()
    return di_flags.plan_instance(instance, RULES, fp, probe, hf, {"path": "/opt/dflash/trees/t11"}, **kw)


def test_rules_hold_for_their_version_range():
    p11 = plan(good(), host_version="0.5.11")
    assert "hybrid-spec-radix-extra-buffer" in [a["rule"] for a in p11["applied"]]
    p17 = plan(good(sglang_version="0.5.17"), host_version="0.5.11")
    skipped = {s["rule"]: s["reason"] for s in p17["skipped"]}
    assert skipped["hybrid-spec-radix-extra-buffer"] == ("holds for sglang <0.5.17; this instance runs sglang "
                                                         "0.5.17")
    assert "--mamba-scheduler-strategy" not in p17["args"]
    assert p17["sglang_version"] == "0.5.17" and p11["sglang_version"] == "0.5.11"
    # the tree verify note: 0.5.11's proof on the H200, 0.5.17's on the CPU
    dd11 = plan(good(algorithm="DDTREE"), host_version="0.5.11")
    dd17 = plan(good(algorithm="DDTREE", sglang_version="0.5.17"), host_version="0.5.11")
    assert "hybrid-target-tree-verify-per-node-state" in [a["rule"] for a in dd11["applied"]]
    note = next(a for a in dd17["applied"] if a["rule"] == "hybrid-target-tree-verify-per-node-state-v2")
    assert "with sglang 0.5.17" in note["reason"] and "GPU records are pending" in note["reason"]


def test_the_blackwell_gdn_rule_of_0_5_17():
    hf = {**hybrid_facts(), "listeners": []}
    p = plan(good(gpus=[0], sglang_version="0.5.17"), fp=B200, host_facts=hf)
    rule = next(a for a in p["applied"] if a["rule"] == "blackwell-hybrid-gdn-attention")
    assert rule["flags"] == ["--attention-backend", "triton"]
    assert "allows only fa4, triton or trtllm_mha attention" in rule["reason"] and "SM 10.0" in rule["reason"]
    for version in ("0.5.11", "0.5.23"):
        assert "blackwell-hybrid-gdn-attention" not in [a["rule"] for a in plan(
            good(gpus=[0], sglang_version=version), fp=B200, host_facts=hf)["applied"]]
    assert "blackwell-hybrid-gdn-attention" not in [a["rule"] for a in plan(good(sglang_version="0.5.17"))["applied"]]
    # a pinned allowed backend wins over the rule
    pinned = plan(good(gpus=[0], sglang_version="0.5.17", pin_flags={"--attention-backend": "trtllm_mha"}), fp=B200,
                  host_facts=hf)
    assert "blackwell-hybrid-gdn-attention" not in [a["rule"] for a in pinned["applied"]]


def test_the_bfloat16_state_rule_of_flashinfer_gdn_on_sm10_plus():
    fi = good(sglang_version="0.5.17", extra_args=["--linear-attn-decode-backend", "flashinfer"])
    p = plan(fi)
    rule = next(a for a in p["applied"] if a["rule"] == "blackwell-gdn-flashinfer-bf16-state")
    assert rule["flags"] == ["--mamba-ssm-dtype", "bfloat16"]
    assert p["args"][p["args"].index("--mamba-ssm-dtype") + 1] == "bfloat16"
    assert "blackwell-gdn-flashinfer-bf16-state" not in [a["rule"] for a in plan(fi, fp=H200)["applied"]]
    assert "blackwell-gdn-flashinfer-bf16-state" not in [a["rule"] for a in plan(dict(fi, sglang_version="0.5.11"))[
        "applied"]]
    both = plan(dict(fi, extra_args=fi["extra_args"] + ["--mamba-ssm-dtype", "bfloat16"]))
    assert any(s["rule"] == "blackwell-gdn-flashinfer-bf16-state" and s.get("cause_removed") for s in both["skipped"])
    # float32 pinned with flashinfer decode on SM 12: refused before any change
    errs = check([dict(fi, extra_args=fi["extra_args"] + ["--mamba-ssm-dtype", "float32"])])
    assert len(errs) == 1 and "--mamba-ssm-dtype float32 with --linear-attn-decode-backend flashinfer" in errs[0]


def test_two_instances_with_different_versions_get_their_own_runtime():
    runtimes = {"0.5.11": {"venv": "/opt/dflash/layers/overlay-aaaaaaaaaaaa", "tree": {"path": "/t/sglang-0.5.11-a"},
                           "probe": PROBE_GOOD},
                "0.5.17": {"venv": "/opt/dflash/layers/overlay-bbbbbbbbbbbb", "tree": {"path": "/t/sglang-0.5.17-b"},
                           "probe": {**PROBE_GOOD, "xgrammar": {"ok": True, "version": "0.1.10",
                                                                "structural_tag": False}}}}
    hf = hybrid_facts()
    hf["runtimes"] = {"0.5.17": {"overlay": {"nvidia_lib_dirs": ["/opt/dflash/layers/overlay-bbbbbbbbbbbb/nv"]},
                                 "sgl_kernel": {}}}
    flags = di_flags.plan_flags([good(), good(name="new", gpus=[2], port=30002, sglang_version="0.5.17")], RULES,
                                CT200, PROBE_GOOD, hf, {"path": "/t/sglang-0.5.11-a"}, host_version="0.5.11",
                                runtimes=runtimes)
    old, new = flags["dflash-gpu1"], flags["new"]
    assert (old["sglang_version"], old["venv"], old["tree_path"], old["env"]["PYTHONPATH"]) == (
        "0.5.11", "/opt/dflash/layers/overlay-aaaaaaaaaaaa", "/t/sglang-0.5.11-a", "/t/sglang-0.5.11-a")
    assert (new["sglang_version"], new["venv"], new["tree_path"], new["env"]["PYTHONPATH"]) == (
        "0.5.17", "/opt/dflash/layers/overlay-bbbbbbbbbbbb", "/t/sglang-0.5.17-b", "/t/sglang-0.5.17-b")
    # each instance's rules see its own version's probe and CUDA pieces
    assert "xgrammar-without-structuraltag" in [a["rule"] for a in new["applied"]]
    assert "xgrammar-without-structuraltag" not in [a["rule"] for a in old["applied"]]
    xgr = next(a for a in new["applied"] if a["rule"] == "xgrammar-without-structuraltag")
    assert "pin xgrammar==0.2.1 (what sglang 0.5.17 pins" in xgr["prefer"]
    assert new["env"]["LD_LIBRARY_PATH"] == "/opt/dflash/layers/overlay-bbbbbbbbbbbb/nv"
    assert "LD_LIBRARY_PATH" not in old["env"]
    lines = di_flags.flags_report(flags)
    assert "  sglang 0.5.17 (venv /opt/dflash/layers/overlay-bbbbbbbbbbbb, tree /t/sglang-0.5.17-b)" in lines


def test_the_rules_table_names_its_ranges_well():
    assert di_rules.check_rules_table(RULES) == []
    bad = copy.deepcopy(RULES[:1])
    bad[0]["versions"] = "~=0.5"
    assert di_rules.check_rules_table(bad) == [(f"rule {bad[0]['name']}: versions: range '~=0.5': '~=0.5' is not a "
                                               "comparison like >=0.5.17")]
    ranged = {r["name"]: r["versions"] for r in RULES if "versions" in r}
    assert ranged["blackwell-hybrid-gdn-attention"] == ">=0.5.17,<0.5.23"
    assert set(RULE_NAMES) >= set(ranged)


def test_the_instance_field_is_in_the_argument_specs():
    specs = yaml.safe_load((ROOT / "roles/dflash_instances/meta/argument_specs.yml").read_text())
    opts = specs["argument_specs"]["main"]["options"]["dflash_instances"]["options"]
    assert opts["sglang_version"]["type"] == "str"
