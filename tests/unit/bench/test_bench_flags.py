"""A temporary instance's command line from the release's instance: the H200 release's real manifest
(manifest.json of gpu-harness/records/2026-11-30-e2e2, deployed by gpu-harness/e2e.sh)."""

import json

import pytest
from ansible.module_utils.dflash_bench import flags as fl
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_common.argv import get_flag
from gpu_records import record_file

MANIFEST = json.loads(record_file("2026-11-30-e2e2", "manifest.json"))
BASE = dict(MANIFEST["instances"]["h200-dflash"], name="h200-dflash")


def cfg(**kw):
    return mx.normalize([kw])[0]


def test_flag_helpers_keep_order_and_replace_in_place():
    args = ["--a", "1", "--b", "--c=3", "--a", "2"]
    assert get_flag(args, "--a") == "2" and get_flag(args, "--b") is True and get_flag(args, "--c") == "3"
    assert fl.set_flag(args, "--a", 9) == ["--a", "9", "--b", "--c=3"]
    assert fl.set_flag(args, "--d") == args + ["--d"]
    assert fl.drop_flags(args, lambda f: f in ("--a", "--c")) == ["--b"]


def test_ddtree_from_the_dflash_release_keeps_the_release_flags():
    out = fl.config_command(BASE, cfg(algorithm="DDTREE", budget=7, topk=4), 30105, [0])
    a = out["args"]
    assert get_flag(a, "--speculative-algorithm") == "DDTREE"
    assert get_flag(a, "--speculative-ddtree-budget") == "7" and get_flag(a, "--speculative-ddtree-topk") == "4"
    assert get_flag(a, "--speculative-ddtree-mode") == "tree"
    assert get_flag(a, "--speculative-draft-model-path") == "/srv/models/draft"
    # the release's own flags stay: model, context, dummy weights, the rule's attention backend, graphs
    for flag, value in (("--model-path", "/srv/models/target"), ("--context-length", "4096"),
                        ("--load-format", "dummy"), ("--attention-backend", "flashinfer"),
                        ("--cuda-graph-max-bs", "4"), ("--mem-fraction-static", "0.5")):
        assert get_flag(a, flag) == value
    assert get_flag(a, "--host") == "127.0.0.1" and get_flag(a, "--port") == "30105"
    assert get_flag(a, "--enable-metrics") is True
    assert a.count("--port") == 1 and a.count("--speculative-algorithm") == 1
    assert out["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0",
                          "PYTHONPATH": "/opt/dflash/trees/sglang-0.5.11-5e5002dc4dc8"}
    assert "--host 0.0.0.0 -> 127.0.0.1 (bench servers listen on loopback only)" in out["changes"]
    assert out["overrides"] == []


def test_none_drops_every_speculative_flag():
    a = fl.config_command(BASE, cfg(algorithm="NONE"), 30100, [0])["args"]
    assert not [x for x in a if x.startswith("--speculative-")]
    assert "/srv/models/draft" not in a and get_flag(a, "--model-path") == "/srv/models/target"


def test_an_attention_backend_replacing_a_rule_is_reported_with_the_rule():
    out = fl.config_command(BASE, cfg(algorithm="DFLASH", attention_backend="triton",
                                      extra_args=["--max-total-tokens", "16384", "--sleep-on-idle"],
                                      env={"HF_HUB_OFFLINE": "1"}), 30101, [0],
                            common_args=["--cuda-graph-max-bs", "8"])
    assert out["overrides"] == [{"flag": "--attention-backend", "rule": "sm90-without-fa3", "release": "flashinfer",
                                 "bench": "triton"}]
    a = out["args"]
    assert get_flag(a, "--cuda-graph-max-bs") == "8" and get_flag(a, "--max-total-tokens") == "16384"
    assert get_flag(a, "--sleep-on-idle") is True and out["env"]["HF_HUB_OFFLINE"] == "1"


def test_tp_follows_the_gpus():
    a = fl.config_command(BASE, cfg(algorithm="DFLASH", tp=2), 30101, [2, 3])
    assert get_flag(a["args"], "--tp-size") == "2" and a["env"]["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_speculation_without_a_draft_is_refused():
    base = dict(BASE, args=fl.drop_flags(BASE["args"], lambda f: f.startswith("--speculative-")))
    with pytest.raises(fl.FlagsError, match="DFLASH needs a draft model.*h200-dflash has none"):
        fl.config_command(base, cfg(algorithm="DFLASH"), 30101, [0])
    a = fl.config_command(base, cfg(algorithm="DFLASH", draft_model_path="/srv/models/draft"), 30101, [0])["args"]
    assert get_flag(a, "--speculative-draft-model-path") == "/srv/models/draft"
