"""Tensor parallel on one host and across hosts: fields, their checks on one host, the tp.* rule facts
and the rules on real topologies, the launch flags, the smoke record of a node rank > 0."""

import copy
from pathlib import Path

import pytest
from ansible.module_utils.dflash_fingerprint import topo
from ansible.module_utils.dflash_instances import fields as di_fields
from ansible.module_utils.dflash_instances import flags as di_flags
from ansible.module_utils.dflash_instances import tp
from ansible.module_utils.dflash_instances import validate as di_validate
from test_instances import CT200_FACTS, DRAFT, MODEL, RULE_NAMES
from test_rules import CT129, RULES

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "topo"
QWEN = {"num_attention_heads": 64, "num_key_value_heads": 8, "source": f"{MODEL}/config.json"}


def facts(**extra):
    f = copy.deepcopy(CT200_FACTS)
    f["models"] = {MODEL: dict(QWEN)}
    f.update(extra)
    return f


def inst(**kw):
    base = {"name": "tp2", "gpus": [1, 2], "port": 30002, "algorithm": "DFLASH", "model_path": MODEL,
            "draft_model_path": DRAFT}
    base.update(kw)
    return base


def validate(instances, host_facts=None):
    return di_validate.validate_instances("ct200", instances, None, host_facts or facts(), RULE_NAMES)


def fp_with(topo_name, p2p_name=None, n=8):
    fp = copy.deepcopy(CT129)
    fp["topology"] = topo.parse_topology((FIX / f"{topo_name}.topo.txt").read_text(),
                                         (FIX / f"{p2p_name}.p2p.txt").read_text() if p2p_name else None)
    return fp


# --------------------------------------------------------------------------- fields on one host

def test_tp_over_two_gpus_and_multinode_are_valid():
    assert validate([inst()]) == []
    mn = inst(gpus=[1], tp=2, nnodes=2, node_rank=0, dist_init_addr="10.0.0.1:29500")
    assert validate([mn]) == []
    assert di_fields.effective_instance(inst(gpus=[1, 2], nnodes=2, node_rank=1, dist_init_addr="h:29500"))["tp"] == 4


@pytest.mark.parametrize("changes, field, needle", [
    ({"nnodes": 2, "node_rank": 0}, "dist_init_addr", "is required with nnodes 2"),
    ({"nnodes": 2, "dist_init_addr": "10.0.0.1:29500"}, "node_rank", "is required with nnodes 2"),
    ({"nnodes": 2, "node_rank": 2, "dist_init_addr": "10.0.0.1:29500"}, "node_rank", "must be an integer 0..1"),
    ({"nnodes": 0}, "nnodes", "must be a positive integer"),
    ({"node_rank": 1}, "node_rank", "needs nnodes > 1"),
    ({"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1"}, "dist_init_addr", "is not 'host:port'"),
    ({"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:80"}, "dist_init_addr", "out of range 1024..65535"),
    ({"nnodes": 2, "node_rank": 0, "dist_init_addr": "fd00::1:29500"}, "dist_init_addr", "in brackets"),
    ({"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:30002"}, "dist_init_addr",
     "is the HTTP port of instance 'tp2'"),
    ({"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:30000"}, "dist_init_addr",
     "unit ddtree-wrapper.service) and it is not one of our dflash-* units"),
    ({"metrics": "yes"}, "metrics", "must be true or false"),
    ({"metrics": False, "extra_args": ["--enable-metrics"]}, "metrics", "is false but extra_args"),
    ({"extra_args": ["--node-rank", "1"]}, "extra_args", "--node-rank is set from the field 'node_rank'"),
    ({"pin_flags": {"--dist-init-addr": "x:1"}}, "pin_flags.--dist-init-addr", "set from the field 'dist_init_addr'"),
    ({"gpus": [1, 2, 3], "tp": 3}, "tp", "tp 3 does not divide the model's 64 attention heads"),
    ({"gpus": [1], "tp": 2}, "tp", "does not match the 1 GPU(s) [1]: tensor parallelism"),
    ({"gpus": [1], "tp": 3, "nnodes": 2, "node_rank": 0, "dist_init_addr": "h:29500"}, "tp", "x nnodes 2"),
])
def test_each_bad_form_names_host_instance_and_field(changes, field, needle):
    errors = validate([inst(**changes)])
    mine = [e for e in errors if f"field '{field}'" in e]
    assert mine and needle in mine[0], errors
    assert mine[0].startswith("ct200: instance 'tp2': ")


def test_kv_heads_must_split_evenly():
    f = facts()
    f["models"][MODEL] = {"num_attention_heads": 48, "num_key_value_heads": 6, "source": "config.json"}
    assert any("key/value heads do not split evenly" in e for e in validate([inst(gpus=[1, 2, 3, 4])], f))
    assert validate([inst(gpus=[1, 2, 3])], f) == []  # 48 % 3 == 0 and 6 % 3 == 0


def test_dp_attention_reserves_the_ports_after_the_rendezvous():
    mn = inst(gpus=[1], tp=2, nnodes=2, node_rank=0, dist_init_addr="h:29500", extra_args=["--enable-dp-attention"])
    assert [p for p, _ in tp.reserved_ports(mn)] == [29500, 29501, 29502, 29503, 29504, 29505]
    other = inst(name="other", gpus=[3], port=29503)
    errors = validate([mn, other])
    assert any("port 29503 (dist_init_addr port + 3 (DP attention)) is the HTTP port of instance 'other'" in e
               for e in errors)


def test_model_facts_read_config_and_text_config(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"num_attention_heads": 40, "num_key_value_heads": 8}')
    (tmp_path / "vl").mkdir()
    (tmp_path / "vl" / "config.json").write_text('{"text_config": {"num_attention_heads": 32}}')
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("not json")
    got = tp.model_facts([{"model_path": str(tmp_path / n)} for n in ("m", "vl", "bad", "missing")])
    assert got[str(tmp_path / "m")]["num_attention_heads"] == 40
    assert got[str(tmp_path / "vl")]["source"].endswith("config.json text_config")
    assert str(tmp_path / "bad") not in got and str(tmp_path / "missing") not in got


def test_lab_model_config_splits_over_tp2_not_tp16():
    # the lab's Qwen3.6-27B config (hybrid, as the real one): 24 attention heads, 4 KV heads
    lab = Path(__file__).resolve().parents[3] / "lab" / "models" / "Qwen3.6-27B"
    cfg = tp.model_facts([{"model_path": str(lab)}])[str(lab)]
    assert cfg["num_attention_heads"] == 24 and tp.heads_error(2, cfg) is None
    assert "tp 16 does not divide the model's 24 attention heads" in tp.heads_error(16, cfg)
    assert "4 key/value heads do not split evenly" in tp.heads_error(3, cfg)


# --------------------------------------------------------------------------- launch flags

def test_launch_flags():
    assert tp.launch_args(inst()) == ["--enable-metrics"]
    assert tp.launch_args(inst(metrics=False)) == []
    assert tp.launch_args(inst(extra_args=["--enable-metrics"])) == []  # not twice
    mn = inst(gpus=[1], nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:29500")
    assert tp.launch_args(mn) == ["--enable-metrics", "--nnodes", "2", "--node-rank", "1",
                                  "--dist-init-addr", "10.0.0.1:29500"]
    args = di_flags.build_args(mn, [])
    assert args[args.index("--tp-size") + 1] == "2"


# --------------------------------------------------------------------------- rules on real topologies

def plan(instance, fp):
    return di_flags.plan_instance(instance, RULES, fp, None, {}, None)


def applied(p):
    return {a["rule"]: a for a in p["applied"]}


def test_pcie_gpus_without_p2p_get_nccl_env_and_no_custom_all_reduce():
    p = plan(inst(gpus=[0, 1]), fp_with("rtx5090x2-phb", "rtx5090x2-phb"))
    a = applied(p)["tp-gpus-without-p2p"]
    assert "--disable-custom-all-reduce" in p["args"] and p["env"]["NCCL_P2P_DISABLE"] == "1"
    assert "0-1 GNS (GPU not supported)" in a["reason"]
    assert "tp-gpus-across-numa-nodes" not in applied(p)


def test_p2p_ok_two_gpus_get_nothing():
    p = plan(inst(gpus=[0, 1]), fp_with("rtx5090x2-phb", "p2p-ok2"))
    assert not {"tp-gpus-without-p2p", "tp-pcie-more-than-two-gpus"} & set(applied(p))
    assert "--disable-custom-all-reduce" not in p["args"]


def test_more_than_two_pcie_gpus_with_p2p():
    fp = fp_with("phb4-prompt")
    fp["topology"]["p2p"] = {f"{a}-{b}": "OK" for a in range(4) for b in range(a + 1, 4)}
    p = plan(inst(gpus=[0, 1, 2, 3]), fp)
    assert "tp-pcie-more-than-two-gpus" in applied(p)
    assert "0-1 PHB" in applied(p)["tp-pcie-more-than-two-gpus"]["reason"]


def test_nvlink_set_across_numa_warns_only():
    p = plan(inst(gpus=[2, 3, 4, 5]), fp_with("h100x8-nv18-ansi"))
    a = applied(p)
    assert {r for r in a if r.startswith("tp-")} == {"tp-gpus-across-numa-nodes"}
    assert a["tp-gpus-across-numa-nodes"]["warn"]
    assert "node 0: GPUs 0, 1, 2, 3; node 1: GPUs 4, 5, 6, 7" in a["tp-gpus-across-numa-nodes"]["prefer"]
    skipped = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert "tp.p2p_ok is unknown" in skipped["tp-gpus-without-p2p"]


def test_single_gpu_and_unknown_topology_fire_nothing():
    assert not {a for a in applied(plan(inst(gpus=[0]), fp_with("rtx4090x8-sys")))} & {
        "tp-gpus-without-p2p", "tp-pcie-more-than-two-gpus", "tp-gpus-across-numa-nodes"}
    p = plan(inst(gpus=[0, 1]), copy.deepcopy(CT129))  # no topology captured
    skipped = {s["rule"]: s["reason"] for s in p["skipped"]}
    assert skipped["tp-gpus-without-p2p"].startswith("not evaluated")


def test_lab_ct129_capture_through_the_real_parser():
    from ansible.module_utils.dflash_fingerprint import collect, merge
    lab = Path(__file__).resolve().parents[3] / "lab" / "captures" / "ct129"
    fp = merge.fingerprint_from_raw(collect.read_capture(str(lab)))
    assert fp["topology"]["links"] == {"0-1": "SYS"} and fp["topology"]["p2p"] == {"0-1": "CNS"}
    p = plan(inst(gpus=[0, 1]), fp)
    assert {"tp-gpus-without-p2p", "tp-gpus-across-numa-nodes"} <= set(applied(p))
