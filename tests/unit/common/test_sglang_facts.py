"""The sglang facts of every supported version (module_utils/dflash_common/sglang.py over files/patches/sglang/
versions.yml) against that version's wheel and patch series, and their readers: the fallback rules' context, the
validation and the diagnosis name the same backends, pins and options for the version an instance runs."""

import ast
import zipfile

import pytest
import yaml
from ansible.module_utils.dflash_common import sglang
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from ansible.module_utils.dflash_instances import model, rules
from sglang_wheel import REPO_ROOT, patch_dir, sglang_wheel, versions

SUPPORTED = sglang.supported()
# where each version declares ATTENTION_BACKEND_CHOICES and its ServerArgs fields
CHOICES = {"0.5.11": "sglang/srt/server_args.py", "0.5.17": "sglang/srt/server_args.py",
           "0.5.23": "sglang/srt/arg_groups/choices.py"}  # fmt: skip


def read(version, rel):
    with zipfile.ZipFile(sglang_wheel(version=version)) as z:
        return z.read(rel).decode()


def names(version):
    with zipfile.ZipFile(sglang_wheel(version=version)) as z:
        return z.namelist()


def _assigned(text, name):
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == name for t in targets):
                return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not assigned")


def test_the_versions_are_the_folders_and_the_default_is_the_shared_default():
    assert SUPPORTED == versions()
    shared = yaml.safe_load((REPO_ROOT / "roles" / "dflash" / "defaults" / "main.yml").read_text())
    assert shared["dflash_sglang_version"] == sglang.default_version()
    assert sglang.version_error("0.5.17") is None
    err = sglang.version_error("0.5.14")
    assert "'0.5.14' is not a version this toolkit supports" in err and "0.5.11, 0.5.17, 0.5.23" in err
    with pytest.raises(sglang.SglangError):
        sglang.facts("0.6.0")


@pytest.mark.parametrize("version", SUPPORTED)
def test_each_versions_facts_are_its_wheels(version):
    sg = sglang.facts(version)
    assert sg.version == version
    assert list(sg.attention_backends) == _assigned(read(version, CHOICES[version]), "ATTENTION_BACKEND_CHOICES")
    # ServerArgs.port: 30000 in every version (dflash_common/sglang.py's DEFAULT_PORT)
    files = [n for n in names(version) if n == "sglang/srt/server_args.py" or n.startswith("sglang/srt/arg_groups/fields/")]
    ports = [ln for f in files for ln in read(version, f).splitlines() if ln.strip().startswith("port:")]
    assert ports and all(ln.rstrip().endswith("= 30000") for ln in ports), ports
    assert sg.default_port == sglang.DEFAULT_PORT == 30000
    # the archs sglang refuses triton attention on ("does not support triton attention backend")
    srcs = "\n".join(read(version, f) for f in names(version) if f.startswith("sglang/srt/") and f.endswith(".py")
                     and ("server_args" in f or "arg_groups" in f))
    for arch in sg.no_triton_attention_archs:
        assert arch in srcs
    assert srcs.count("does not support triton attention backend") >= 1
    # the Hopper default of the version's default-backend function
    assert 'return "fa3"' in srcs and sg.hopper_default_attention == "fa3"
    # meta_info: the accepted-draft name the tokenizer manager writes
    tm = read(version, "sglang/srt/managers/tokenizer_manager.py")
    assert f'meta_info["{sg.meta_info_keys["accepted"]}"]' in tm
    for old in sg.meta_info_keys.get("aliases") or {}:
        assert f'meta_info["{old}"]' in tm
    if version == "0.5.23":
        assert 'meta_info["spec_accepted_drafts"]' not in tm
    # the mamba strategy flag the version parses
    flags = (patch_dir(version) / "server-flags.txt").read_text()
    assert f"\n{sg.mamba_strategy_flag} " in flags
    assert ("\n--mamba-scheduler-strategy " in flags) == (version != "0.5.23")
    # the Blackwell hybrid-GDN sets: in the registry's own words
    reg = read(version, "sglang/srt/layers/attention/attention_registry.py")
    for major in (10, 11, 12):
        allowed = sg.blackwell_hybrid_gdn_attention(major)
        assert allowed and all(f'"{b}"' in reg for b in allowed), (version, major)


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_tree_mask_backends_are_the_series(version):
    """DDTREE's verify backends: 0.5.11's 0102 names the backend classes, 0.5.17+'s 0001 the --attention-backend
    values; sglang's registry says which value builds each class."""
    sg = sglang.facts(version)
    if version == "0.5.11":
        patch = (patch_dir(version) / "0102-ddtree-worker.patch").read_text()
        line = next(ln for ln in patch.splitlines() if ln.startswith("+DDTREE_TREE_MASK_BACKENDS = "))
        classes = ast.literal_eval(line.split("=", 1)[1].strip())
        registry = read(version, "sglang/srt/layers/attention/attention_registry.py")
        built = {}
        for part in registry.split("@register_attention_backend(")[1:]:
            built[ast.literal_eval(part[:part.index(")")])] = [c for c in classes if f"import {c}" in part]
        assert sorted(c for b in sg.tree_mask_attention_backends for c in built[b]) == sorted(classes)
    else:
        patch = (patch_dir(version) / "0001-ddtree-register-algorithm.patch").read_text()
        line = next(ln for ln in patch.splitlines() if ln.startswith("+DDTREE_TREE_MASK_ATTENTION = "))
        assert tuple(ast.literal_eval(line.split("=", 1)[1].strip())) == sg.tree_mask_attention_backends
    assert set(sg.tree_mask_attention_backends) <= set(sg.attention_backends)


@pytest.mark.parametrize("version", [v for v in SUPPORTED if v != "0.5.11"])
def test_ddtree_refusals_are_the_series_messages(version):
    sg = sglang.facts(version)
    spec = (patch_dir(version) / "0001-ddtree-register-algorithm.patch").read_text()
    for name, flag, value, _why in model.DDTREE_FLAG_REFUSALS:
        if name in sg.ddtree_refuses:
            assert f"DDTREE does not support {flag}" in spec, (version, flag)
    assert "DDTREE tree mode cannot run with --enable-linear-replayssm-spec" in spec
    worker = (patch_dir(version) / "0102-ddtree-worker-v2.patch").read_text()
    assert ("Domino / selector / LiLiCorr head" in worker) == ("draft_heads" in sg.ddtree_refuses)


def test_ranges():
    assert sglang.in_range("0.5.17", ">=0.5.17,<0.5.23") and not sglang.in_range("0.5.23", ">=0.5.17,<0.5.23")
    assert sglang.in_range("0.5.11", "<0.5.17") and sglang.in_range("0.5.11", "") and sglang.in_range("0.5.11", None)
    assert sglang.in_range("0.5.10", "==0.5.10.0") and not sglang.in_range("0.5.11", "!=0.5.11")
    assert sglang.range_error(">=0.5.17") is None
    assert "is not a comparison" in sglang.range_error("~=0.5")


def test_accepted_drafts_by_the_versions_name():
    assert sglang.accepted_drafts({"spec_accepted_drafts": 7}) == 7
    assert sglang.accepted_drafts({"spec_num_correct_drafts": 5, "spec_accepted_drafts": 5},
                                  sglang.facts("0.5.17").meta_info_keys) == 5
    assert sglang.accepted_drafts({"spec_num_correct_drafts": 3}) == 3
    assert sglang.accepted_drafts({"spec_accepted_drafts": True}) is None
    assert sglang.proposed_drafts({"spec_num_proposed_drafts": 30}, sglang.facts("0.5.23").meta_info_keys) == 30


@pytest.mark.parametrize("version", SUPPORTED)
def test_rules_validation_and_diagnosis_read_the_same_version(version):
    sg = sglang.facts(version)
    ctx = rules.sglang_facts(sg, [12])
    assert ctx["sglang.version"] == version
    assert ctx["sglang.tree_mask_attention"] == "triton or flashinfer"
    assert ctx["sglang.pin_xgrammar"] == sg.pins["xgrammar"]
    assert ctx["sglang.blackwell_gdn_attention"] == sglang.either(sorted(sg.blackwell_hybrid_gdn_attention(12)))
    arch = sg.no_triton_attention_archs[0]
    errs = model.attention_backend_errors({"algorithm": "DDTREE", "extra_args": [], "pin_flags": {}},
                                          {"architecture": arch}, sg)
    assert errs and "(triton or flashinfer)" in errs[0][1] and f"sglang {version} refuses triton on {arch}" in errs[0][1]
    bad = model.attention_backend_errors({"algorithm": "DFLASH", "extra_args": ["--attention-backend", "fa9"]}, {}, sg)
    assert bad == [("extra_args", f"--attention-backend fa9: sglang {version} accepts " + sglang.either(sg.attention_backends))]
    # the diagnosis' remedies name this version's pins
    d = diagnose_text("ImportError: cannot import name 'StructuralTag' from 'xgrammar'\n", sglang=sg.host())
    assert f"xgrammar=={sg.pins['xgrammar']} (what sglang {version} pins)" in d["remedy"]
    d = diagnose_text("ValueError: DDTREE needs a target attention backend that takes a tree mask in verify "
                      "(triton, flashinfer); the verify would run on fa3. Pass --attention-backend triton.\n",
                      sglang=sg.host())
    assert d["cause"] == "incompatible_options" and "this server runs fa3" in d["summary"]
    assert f"sglang {version}'s default is FA3" in d["remedy"]


def test_a_log_without_a_version_gets_generic_words():
    d = diagnose_text("ImportError: cannot import name 'StructuralTag' from 'xgrammar'\n")
    assert "the xgrammar version this sglang pins" in d["remedy"]
