"""Validator, arguments, environment and read-only host facts of the instances stage."""

import copy
import json
import os
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_instances import fields as di_fields
from ansible.module_utils.dflash_instances import flags as di_flags
from ansible.module_utils.dflash_instances import host as di_host
from ansible.module_utils.dflash_instances import validate as di_validate
from ansible.module_utils.dflash_service.process import unit_from_cgroup
from test_rules import CT129, CT200, PROBE_SEED_CT200, RULES

ROOT = Path(__file__).resolve().parents[3]
RULE_NAMES = [r["name"] for r in RULES]
MODEL, DRAFT = "/dev/shm/Qwen3.6-27B", "/dev/shm/Qwen3.6-27B-DFlash"
# a second DFlash draft trained with a 32-token block (what DDTREE budget 31 needs)
DRAFT32 = "/dev/shm/Qwen3.6-27B-DFlash-b32"

# What library/dflash_instances_facts.py reports on the lab ct200: the foreign DDTree wrapper on
# 30000 (not ours), our own instance already on 30001, both model folders present.
CT200_FACTS = {
    "listeners": [
        {"port": 22, "addr": "0.0.0.0", "pid": 80, "comm": "sshd", "unit": "ssh.service"},
        {"port": 30000, "addr": "0.0.0.0", "pid": 2381466, "comm": "python3", "unit": "ddtree-wrapper.service"},
        {"port": 30001, "addr": "0.0.0.0", "pid": 4242, "comm": "python", "unit": "dflash-dflash-gpu1.service"},
    ],
    "paths": {MODEL: {"exists": True, "isdir": True, "tmpfs": True},
              DRAFT: {"exists": True, "isdir": True, "tmpfs": True},
              DRAFT32: {"exists": True, "isdir": True, "tmpfs": True},
              "/data/Qwen3.6-27B": {"exists": True, "isdir": True, "tmpfs": False},
              "/data/file": {"exists": True, "isdir": False, "tmpfs": False}},
    "drafts": {DRAFT: {"block_size": 16, "block_size_source": "config.json block_size", "error": None},
               DRAFT32: {"block_size": 32, "block_size_source": "config.json dflash_config.block_size",
                         "error": None}},
}


def good(**kw):
    base = {"name": "dflash-gpu1", "gpus": [1], "port": 30001, "algorithm": "DFLASH",
            "model_path": MODEL, "draft_model_path": DRAFT}
    base.update(kw)
    return base


def validate(instances, fp=CT200, facts=CT200_FACTS, checker=None, **kw):
    # as gather_host_facts reports them: every absolute path of the inventory is looked at
    facts = copy.deepcopy(facts)
    for inst in instances if isinstance(instances, list) else []:
        for key in ("model_path", "draft_model_path", "model_source"):
            p = inst.get(key)
            if isinstance(p, str) and p.startswith("/"):
                facts["paths"].setdefault(p, {"exists": False, "isdir": False, "tmpfs": False})
    return di_validate.validate_instances("ct200", instances, fp, facts, RULE_NAMES, gpu_checker=checker, **kw)


GOOD = [
    ("seed ct200 DFLASH on GPU1", [good()]),
    ("DDTREE budget 15 topk 8 (the seeds' best)", [good(algorithm="DDTREE", ddtree={"budget": 15, "topk": 8})]),
    ("shadow-linear", [good(algorithm="DDTREE", ddtree={"mode": "shadow-linear"})]),
    ("DDTREE budget 31 on a 32-block draft", [good(algorithm="DDTREE", ddtree={"budget": 31}, draft_model_path=DRAFT32)]),
    ("DDTREE budget 7 on the 16-block draft", [good(algorithm="DDTREE", ddtree={"budget": 7})]),
    ("DDTREE budget 15 on an explicit 16-token block",
     [good(algorithm="DDTREE", draft_model_path=DRAFT32, extra_args=["--speculative-dflash-block-size", "16"])]),
    ("no speculation, no draft", [good(algorithm="NONE", draft_model_path=None)]),
    ("DDTREE whose guard fallback is no speculation, DFLASH never moved",
     [good(name="a", gpus=[2], port=30002, algorithm="DDTREE", fallback="NONE"), good(fallback=False)]),
    ("two instances, tp2 + tp1", [good(name="a", gpus=[2, 3], port=30002),
                                   good(name="b", gpus=[4], port=30003, tp=1)]),
    ("staged from a persistent copy", [good(model_source="/data/Qwen3.6-27B")]),
    ("extra args, pins, env, disabled rule",
     [good(extra_args=["--cuda-graph-max-bs", "8", "--enable-metrics"], pin_flags={"--sampling-backend": "pytorch"},
           env={"HF_HUB_OFFLINE": "1"}, disabled_rules=["xgrammar-without-structuraltag"])]),
]

BAD = [
    ("duplicate ports", [good(name="a"), good(name="b", gpus=[2])],
     "ct200: instance 'b': field 'port': port 30001 is also used by instance 'a'"),
    ("port held by a foreign service", [good(port=30000)],
     ("ct200: instance 'dflash-gpu1': field 'port': port 30000 is already listening on the host "
     "(0.0.0.0:30000, pid 2381466, python3, unit ddtree-wrapper.service) and it is not one of our dflash-* units")),
    ("port out of range", [good(port=70000)],
     "ct200: instance 'dflash-gpu1': field 'port': 70000 is out of range 1024..65535"),
    ("privileged port", [good(port=80)], "field 'port': 80 is out of range 1024..65535"),
    ("port not an int", [good(port="30001")], "field 'port': must be an integer, got '30001'"),
    ("GPU shared", [good(name="a", gpus=[1, 2], port=30002), good(name="b", gpus=[2], port=30003)],
     "ct200: instance 'b': field 'gpus': GPU 2 is also used by instance 'a'"),
    ("GPU listed twice", [good(gpus=[1, 1])], "field 'gpus': lists a GPU twice: [1, 1]"),
    ("empty gpus", [good(gpus=[])], "field 'gpus': must be a non-empty list"),
    ("tp mismatch", [good(gpus=[1, 2], tp=1)],
     "ct200: instance 'dflash-gpu1': field 'tp': tp 1 does not match the 2 GPU(s) [1, 2]"),
    ("DFLASH without draft", [good(draft_model_path=None)],
     "ct200: instance 'dflash-gpu1': field 'draft_model_path': DFLASH needs a draft model"),
    ("DDTREE without draft", [good(algorithm="DDTREE", draft_model_path="")],
     "field 'draft_model_path': DDTREE needs a draft model"),
    ("DDTREE budget above the block size", [good(algorithm="DDTREE", ddtree={"budget": 16})],
     ("ct200: instance 'dflash-gpu1': field 'ddtree.budget': budget 16 + 1 (the root) = 17 verify tokens exceeds "
      "the draft's block size 16 (from config.json block_size); use budget <= 15, or a DFlash draft trained "
      "with a block_size of at least 17")),
    ("DDTREE budget 31 on the 16-block draft", [good(algorithm="DDTREE", ddtree={"budget": 31})],
     ("ct200: instance 'dflash-gpu1': field 'ddtree.budget': budget 31 + 1 (the root) = 32 verify tokens exceeds "
      "the draft's block size 16 (from config.json block_size); use budget <= 15, or a DFlash draft trained "
      "with a block_size of at least 32")),
    ("DDTREE budget above an explicit block size",
     [good(algorithm="DDTREE", extra_args=["--speculative-dflash-block-size", "8"])],
     ("field 'ddtree.budget': budget 15 + 1 (the root) = 16 verify tokens exceeds the draft's block size 8 "
      "(from --speculative-dflash-block-size); use budget <= 7")),
    ("DDTREE with a 1-token block",
     [good(algorithm="DDTREE", ddtree={"budget": 1}, extra_args=["--speculative-dflash-block-size", "1"])],
     "field 'ddtree.budget': budget 1 + 1 (the root) = 2 verify tokens exceeds the draft's block size 1"),
    ("bad ddtree mode", [good(algorithm="DDTREE", ddtree={"mode": "bushy"})],
     "field 'ddtree.mode': 'bushy' is not one of tree, shadow-linear"),
    ("bad topk", [good(algorithm="DDTREE", ddtree={"topk": 0})], "field 'ddtree.topk': must be a positive integer"),
    ("model path missing", [good(model_path="/dev/shm/nope")],
     "ct200: instance 'dflash-gpu1': field 'model_path': /dev/shm/nope does not exist on the host"),
    ("draft path missing", [good(draft_model_path="/dev/shm/nodraft")],
     "field 'draft_model_path': /dev/shm/nodraft does not exist on the host"),
    ("model path is a file", [good(model_path="/data/file")], "field 'model_path': /data/file is not a directory"),
    ("relative model path", [good(model_path="models/x")], "field 'model_path': must be an absolute path"),
    ("model under /root (ProtectHome)", [good(model_path="/root/models/x")],
     "field 'model_path': /root/models/x is under /home, /root or /run/user"),
    ("model_source for a non-tmpfs model", [good(model_path="/data/Qwen3.6-27B", model_source="/data/Qwen3.6-27B")],
     "field 'model_source': is only used to stage a model onto tmpfs"),
    ("bad algorithm", [good(algorithm="EAGLE")], "field 'algorithm': 'EAGLE' is not one of DFLASH, DDTREE, NONE"),
    ("a fallback that is no algorithm", [good(fallback="EAGLE")],
     ("ct200: instance 'dflash-gpu1': field 'fallback': 'EAGLE' is not one of DFLASH, DDTREE, NONE (or false: the "
     "guard never moves this instance)")),
    ("a fallback that is its own algorithm", [good(algorithm="DDTREE", fallback="ddtree")],
     "ct200: instance 'dflash-gpu1': field 'fallback': ddtree is the instance's own algorithm"),
    ("bad name (unit-unsafe)", [good(name="GPU 1")], "ct200: instance 'GPU 1': field 'name': 'GPU 1' is not a valid"),
    ("name with @", [good(name="a@b")], "field 'name': 'a@b' is not a valid instance name"),
    ("name stage-*", [good(name="stage-x")], "field 'name': 'stage-x' must not start with 'stage-'"),
    ("duplicate names", [good(), good(gpus=[2], port=30002)],
     "ct200: instance 'dflash-gpu1': field 'name': duplicate name 'dflash-gpu1' (also instance #1)"),
    ("missing name", [{k: v for k, v in good().items() if k != "name"}],
     "ct200: instance #1: field 'name': None is not a valid instance name"),
    ("arg with whitespace", [good(extra_args=["--json-model-override-args", "{\"a\": 1}"])],
     "field 'extra_args[1]': '{\"a\": 1}' is empty or contains whitespace"),
    ("managed flag in extra_args", [good(extra_args=["--port", "30005"])],
     "field 'extra_args[0]': --port is set from the field 'port'; set that field instead"),
    ("managed flag pinned", [good(pin_flags={"--tp-size": 2})],
     "field 'pin_flags.--tp-size': --tp-size is set from the field 'tp'"),
    ("pin not a flag", [good(pin_flags={"attention-backend": "triton"})],
     "field 'pin_flags': 'attention-backend' is not a flag"),
    ("env overrides CUDA_VISIBLE_DEVICES", [good(env={"CUDA_VISIBLE_DEVICES": "0"})],
     "field 'env.CUDA_VISIBLE_DEVICES': is derived from the field 'gpus'"),
    ("bad env name", [good(env={"A-B": "1"})], "field 'env': 'A-B' is not a valid environment variable name"),
    ("unknown rule disabled", [good(disabled_rules=["no-such-rule"])],
     "field 'disabled_rules': unknown rule 'no-such-rule'"),
    ("unknown field (typo)", [good(gpu=[1])], "ct200: instance 'dflash-gpu1': field 'gpu': unknown field"),
    ("mem fraction out of range", [good(mem_fraction_static=1.5)],
     "field 'mem_fraction_static': must be a number between 0 and 1"),
    ("context length zero", [good(context_length=0)], "field 'context_length': must be a positive integer"),
    ("instances not a list", {"name": "x"}, "ct200: field 'dflash_instances': must be a list of instances"),
]


@pytest.mark.parametrize(("label", "instances"), GOOD, ids=[g[0] for g in GOOD])
def test_good_inventories_pass(label, instances):
    assert validate(instances) == []


@pytest.mark.parametrize(("label", "instances", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_inventories_rejected_with_message(label, instances, expected):
    before = copy.deepcopy(instances)
    errors = validate(instances)
    assert any(expected in e for e in errors), errors
    for e in errors:
        assert e.startswith("ct200: "), e
    assert instances == before  # pure: the inventory is not modified


def test_all_errors_at_once():
    errors = validate([good(port=30000, gpus=[1, 2], tp=3, draft_model_path=None),
                       good(name="Bad Name", port=99999, gpus=[2])])
    fields = sorted({e.split("field '")[1].split("'")[0] for e in errors})
    assert fields == ["draft_model_path", "gpus", "name", "port", "tp"]
    assert len(errors) >= 6


def test_our_own_listener_is_not_a_conflict():
    assert validate([good(port=30001)]) == []
    facts = copy.deepcopy(CT200_FACTS)
    facts["listeners"][2]["unit"] = "something-else.service"
    assert any("30001 is already listening" in e for e in validate([good(port=30001)], facts=facts))


def test_unmapped_listener_of_the_service_user_is_ours():
    # root without CAP_SYS_PTRACE (a container) cannot read the sglang process's fds: no pid/unit
    facts = copy.deepcopy(CT200_FACTS)
    facts["listeners"][2] = {"port": 30001, "addr": "0.0.0.0", "pid": None, "comm": None, "unit": None,
                             "uid": 998, "user": "sglang"}
    assert validate([good(port=30001)], facts=facts) == []
    facts["listeners"][2]["user"] = "www-data"
    assert validate([good(port=30001)], facts=facts) == [
        ("ct200: instance 'dflash-gpu1': field 'port': port 30001 is already listening on the host "
        "(0.0.0.0:30001, user www-data) and it is not one of our dflash-* units")]


def test_host_wide_disabled_rules_checked():
    errors = validate([good()], host_disabled_rules=["nope"])
    assert errors == [(f"ct200: field 'dflash_instances_disabled_rules': unknown rule 'nope' "
                      f"(known: {', '.join(sorted(RULE_NAMES))})")]


def test_staged_model_may_be_absent_now():
    assert validate([good(model_path="/dev/shm/not-yet", model_source="/data/Qwen3.6-27B")]) == []


def test_protect_home_off_allows_home_paths():
    facts = copy.deepcopy(CT200_FACTS)
    facts["paths"]["/root/m"] = {"exists": True, "isdir": True}
    assert validate([good(model_path="/root/m")], facts=facts, protect_home=False) == []


# --- GPUs through the fingerprint stage's check_requested_gpus -------------------------------

def _checker():
    return di_validate.default_gpu_checker()


def test_busy_gpu0_rejected_unless_allowed():
    checker = _checker()
    errors = validate([good(gpus=[0])], checker=checker)
    assert errors and all(e.startswith("ct200: instance 'dflash-gpu1': field 'gpus': ") for e in errors)
    assert any("GPU 0" in e and "allow_busy_gpus: true" in e for e in errors), errors
    assert validate([good(gpus=[0], allow_busy_gpus=True)], checker=checker) == []


def test_missing_gpu_index_rejected():
    checker = _checker()
    errors = validate([good(gpus=[8])], checker=checker)
    assert errors and "field 'gpus'" in errors[0] and "8" in errors[0]
    assert validate([good(gpus=[1, 2, 3, 4, 5, 6, 7], port=30002)], checker=checker) == []


def test_ct129_lab_instance_valid():
    checker = _checker()
    facts = {"listeners": [], "paths": CT200_FACTS["paths"], "drafts": CT200_FACTS["drafts"]}
    assert di_validate.validate_instances("ct129", [good(gpus=[0], port=30000)], CT129, facts, RULE_NAMES,
                                 gpu_checker=checker) == []


# --- arguments and environment ---------------------------------------------------------------

def test_args_are_exactly_the_launch_server_argv():
    inst = good(algorithm="DDTREE", mem_fraction_static=0.85, context_length=8192, gpus=[1, 2],
                extra_args=["--cuda-graph-max-bs", "8"], pin_flags={"--enable-metrics": True, "--x": False})
    p = di_flags.plan_instance(inst, RULES, CT200, PROBE_SEED_CT200, {}, {"path": "/opt/dflash/trees/sglang-0.5.11-abc"})
    assert p["args"] == [
        "--model-path", MODEL, "--host", "127.0.0.1", "--port", "30001", "--tp-size", "2",
        "--mem-fraction-static", "0.85", "--context-length", "8192",
        "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", DRAFT,
        "--speculative-ddtree-budget", "15", "--speculative-ddtree-topk", "8", "--speculative-ddtree-mode", "tree",
        "--attention-backend", "triton", "--sampling-backend", "pytorch",
        "--speculative-draft-attention-backend", "triton", "--grammar-backend", "none",
        "--cuda-graph-max-bs", "8", "--enable-metrics",
    ]
    assert p["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,2",
                        "PYTHONPATH": "/opt/dflash/trees/sglang-0.5.11-abc"}
    assert all(not any(c.isspace() for c in a) for a in p["args"])


def test_env_overlay_libs_and_user_env():
    hf = {"overlay": {"nvidia_lib_dirs": ["/o/nvidia/cu13/lib", "/o/nvidia/nccl/lib"], "nvcc": None}}
    p = di_flags.plan_instance(good(env={"HF_HUB_OFFLINE": "1"}), RULES, CT129, {}, hf, None)
    assert p["env"]["LD_LIBRARY_PATH"] == "/o/nvidia/cu13/lib:/o/nvidia/nccl/lib"
    assert p["env"]["HF_HUB_OFFLINE"] == "1"
    assert "PYTHONPATH" not in p["env"]


def test_plan_flags_keys_by_instance_and_report_lines():
    flags = di_flags.plan_flags([good(), good(name="b", gpus=[2], port=30002, algorithm="NONE", draft_model_path=None)],
                          RULES, CT200, PROBE_SEED_CT200, {}, None)
    assert sorted(flags) == ["b", "dflash-gpu1"]
    for f in flags.values():
        assert set(f) >= {"args", "env", "applied", "skipped"}
        for a in f["applied"]:
            assert set(a) >= {"rule", "reason", "flags"}
    lines = di_flags.flags_report(flags)
    assert any(line.startswith("dflash-gpu1: python -m sglang.launch_server --model-path") for line in lines)
    assert any("rule xgrammar-without-structuraltag: --grammar-backend none -- xgrammar 0.1.10" in ln
               for ln in lines)


# --- host facts (read-only) ------------------------------------------------------------------

PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 51234 1 0 0 100 0 0 10 0
   1: 0100007F:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 51240 1 0 0 100 0 0 10 0
   2: 0100007F:9C40 0100007F:7530 01 00000000:00000000 00:00000000 00000000     0        0 51250 1 0 0 100 0 0 10 0
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9001 1 0 0 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9002 1 0 0 100 0 0 10 0
"""


def test_parse_proc_net_tcp():
    assert di_host.parse_proc_net_tcp(PROC_NET_TCP) == [(30000, "0.0.0.0", "51234", 0),
                                                   (30001, "127.0.0.1", "51240", 999)]
    assert di_host.parse_proc_net_tcp(PROC_NET_TCP6, ipv6=True) == [(22, "::", "9001", 0), (8080, "127.0.0.1", "9002", 0)]


@pytest.mark.parametrize(("text", "unit"), [
    ("0::/system.slice/ddtree-wrapper.service\n", "ddtree-wrapper.service"),
    ("12:pids:/system.slice/dflash-a.service\n1:name=systemd:/system.slice/dflash-a.service\n0::/\n",
     "dflash-a.service"),
    ("0::/user.slice/user-0.slice/session-3.scope\n", "session-3.scope"),
    ("0::/\n", None),
])
def test_unit_from_cgroup(text, unit):
    assert unit_from_cgroup(text) == unit


def test_read_listeners_maps_sockets_to_units(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(PROC_NET_TCP)
    (proc / "net" / "tcp6").write_text(PROC_NET_TCP6)
    (proc / "mounts").write_text("tmpfs /dev/shm tmpfs rw 0 0\n/dev/sda1 / ext4 rw 0 0\n")
    for pid, inode, comm, cg in ((100, "51234", "python3", "0::/system.slice/ddtree-wrapper.service"),
                                 (200, "51240", "python", "0::/system.slice/dflash-gpu1.service")):
        d = proc / str(pid)
        (d / "fd").mkdir(parents=True)
        os.symlink(f"socket:[{inode}]", d / "fd" / "3")
        os.symlink("/dev/null", d / "fd" / "0")
        (d / "comm").write_text(comm + "\n")
        (d / "cgroup").write_text(cg + "\n")
    got = {(x["port"], x["addr"]): x for x in di_host.read_listeners(str(proc))}
    assert got[(30000, "0.0.0.0")] | {"user": None} == {"port": 30000, "addr": "0.0.0.0", "pid": 100, "comm": "python3",
                                                        "unit": "ddtree-wrapper.service", "uid": 0, "user": None}
    assert got[(30001, "127.0.0.1")]["unit"] == "dflash-gpu1.service" and got[(30001, "127.0.0.1")]["uid"] == 999
    assert got[(22, "::")]["pid"] is None and got[(22, "::")]["unit"] is None


@pytest.mark.parametrize(("cfg", "want"), [
    ({"dflash_config": {"block_size": 8}, "block_size": 16}, (8, "config.json dflash_config.block_size", None)),
    ({"block_size": 16}, (16, "config.json block_size", None)),
    ({"model_type": "qwen3"}, (None, None, None)),
    ({"block_size": "x"}, (None, "config.json block_size", "config.json block_size is 'x', not a positive integer")),
])
def test_draft_block_size(cfg, want):
    assert di_host.draft_block_size(json.dumps(cfg)) == want


def test_lab_draft_config_block_size():
    text = (ROOT / "lab/models/Qwen3.6-27B-DFlash/config.json").read_text()
    assert di_host.draft_block_size(text)[0] == 16


def test_gather_host_facts(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "mounts").write_text(f"tmpfs {tmp_path}/shm tmpfs rw 0 0\n")
    (tmp_path / "shm" / "m").mkdir(parents=True)
    (tmp_path / "shm" / "d").mkdir()
    (tmp_path / "shm" / "d" / "config.json").write_text(json.dumps({"dflash_config": {"block_size": 16}}))
    units = tmp_path / "units"
    units.mkdir()
    for u in ("dflash-a.service", "dflash-stage-a.service", "dflash-old.service", "other.service"):
        (units / u).write_text("")
    layer = tmp_path / "layer"
    sp = layer / "lib" / "python3.12" / "site-packages" / "nvidia"
    for d in ("cu13/lib", "cu13/bin", "nccl/lib"):
        (sp / d).mkdir(parents=True)
    (sp / "cu13" / "bin" / "nvcc").write_text("")
    runner = {str(sp / "cu13" / "bin" / "nvcc"): "Cuda compilation tools, release 13.0, V13.0.88\n"}
    inst = {"name": "a", "model_path": str(tmp_path / "shm" / "m"), "draft_model_path": str(tmp_path / "shm" / "d")}
    hf = di_host.gather_host_facts([inst], str(layer), str(units), str(proc), runner=lambda argv: runner[argv[0]])
    assert hf["paths"][inst["model_path"]] == {"exists": True, "isdir": True, "tmpfs": True,
                                               "realpath": inst["model_path"]}
    assert hf["drafts"][inst["draft_model_path"]]["block_size"] == 16
    assert hf["units"] == ["dflash-a.service", "dflash-old.service", "dflash-stage-a.service"]
    assert hf["overlay"]["nvidia_lib_dirs"] == [str(sp / "cu13" / "lib"), str(sp / "nccl" / "lib")]
    assert hf["overlay"]["nvcc"] == {"path": str(sp / "cu13" / "bin" / "nvcc"), "home": str(sp / "cu13"),
                                     "version": "13.0"}


def test_argument_specs_mirror_the_schema():
    specs = yaml.safe_load((ROOT / "roles/dflash_instances/meta/argument_specs.yml").read_text())
    opts = specs["argument_specs"]["main"]["options"]["dflash_instances"]["options"]
    assert set(opts) == di_fields.INSTANCE_KEYS
    assert set(opts["ddtree"]["options"]) == di_fields.DDTREE_KEYS
    # the role's own defaults over the shared inputs' (roles/dflash, its meta dependency)
    defaults = yaml.safe_load((ROOT / "roles/dflash/defaults/main.yml").read_text())
    defaults.update(yaml.safe_load((ROOT / "roles/dflash_instances/defaults/main.yml").read_text()))
    for name in specs["argument_specs"]["main"]["options"]:
        assert name in defaults, name


def test_filter_plugin_wires_the_pure_functions():
    import importlib.util
    spec = importlib.util.spec_from_file_location("dflash_instances_filters", ROOT / "filter_plugins/dflash_instances.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    filters = mod.FilterModule().filters()
    errors = filters["dflash_instances_errors"]([good(port=30000)], "ct200", CT200, CT200_FACTS, RULES)
    assert errors == [
        ("ct200: instance 'dflash-gpu1': field 'port': port 30000 is already listening on the host (0.0.0.0:30000, "
        "pid 2381466, python3, unit ddtree-wrapper.service) and it is not one of our dflash-* units")]
    flags = filters["dflash_instances_flags"]([good()], RULES, CT200, PROBE_SEED_CT200, CT200_FACTS, None)
    assert "--grammar-backend" in flags["dflash-gpu1"]["args"]
    assert filters["dflash_instances_report"](flags)[0].startswith("dflash-gpu1: python -m sglang.launch_server")
    assert filters["dflash_instances_unit_files"]([good()], "/opt/dflash/units", "/etc/systemd/system") == [
        {"instance": "dflash-gpu1", "src": "/opt/dflash/units/dflash-dflash-gpu1.service",
         "dest": "/etc/systemd/system/dflash-dflash-gpu1.service"}]


def test_reasoning_parser_and_smoke_gates_fields():
    inst = good(reasoning_parser="qwen3", smoke_gates={"perf_ratio": 0.9})
    assert validate([inst]) == []
    args = di_flags.plan_instance(inst, RULES, CT200, PROBE_SEED_CT200, {}, None)["args"]
    assert args[args.index("--reasoning-parser") + 1] == "qwen3"
    errs = validate([good(reasoning_parser="qwen 3", smoke_gates={"perf_ratio": 2, "bogus": True},
                          extra_args=["--reasoning-parser", "x"])])
    assert "ct200: instance 'dflash-gpu1': field 'reasoning_parser': must be a parser name" in errs[1]
    assert any("field 'smoke_gates.perf_ratio': must be a fraction in (0, 1]" in e for e in errs)
    assert any("field 'smoke_gates.bogus': unknown gate setting" in e for e in errs)
    assert any("--reasoning-parser is set from the field 'reasoning_parser'" in e for e in errs)


def test_smoke_gates_argument_spec_mirrors_the_gate_settings():
    from ansible.module_utils.dflash_release.gates_config import DEFAULTS
    specs = yaml.safe_load((ROOT / "roles/dflash_instances/meta/argument_specs.yml").read_text())
    gates = specs["argument_specs"]["main"]["options"]["dflash_instances"]["options"]["smoke_gates"]["options"]
    assert set(gates) == set(DEFAULTS)
