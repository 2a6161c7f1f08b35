"""gpu-harness/tune_gpu.sh's CPU dry run: tune_h200.yml's two passes planned by the bench stage against the H200's
hybrid DDTREE release (its recorded manifest), their servers sized by tune_memory.py (gpu_memory.py) for the memory
an H200 and an 80 GB H100 have left beside the deployed instance, and the oracle's prompts read as a tune prompts
file."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench import plan as bp
from ansible.module_utils.dflash_bench import prompts as pr
from ansible.module_utils.dflash_bench import tune
from ansible.module_utils.dflash_bench import tune_rules as tr
from ansible.module_utils.dflash_common.argv import arg_value, has_flag
from ansible.module_utils.dflash_fingerprint import collect, merge
from ansible.module_utils.dflash_instances import model as dm
from gpu_records import record_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu-harness"))
import gpu_memory as G
import tune_memory as T
import tune_oracle

VARS = yaml.safe_load((ROOT / "gpu-harness/tune_h200.yml").read_text())
MEM = VARS["tune_gpu_memory"]
# (total, free) MiB of GPU 0 with the deployed h200-ddtree serving (--mem-fraction-static 0.5): on the H200 as the
# record's probe read it beside the server (2026-12-03-e2e-deploy, probe-gpus.log: 55788 MiB free; 86750 MiB in
# use, i.e. 14865 beside half the card); on an 80 GB H100 half of that card and the same 14865 beside it
H200 = (143771, 55788)
H100 = (81559, 81559 - 81559 // 2 - 14865)
H200_EMPTY = (143771, 143000)  # nothing deployed
LAB_HYBRID = dm.target_facts((ROOT / "lab/models/Qwen3.6-27B/config.json").read_text())


def sized(name, gpu):
    return T.size(VARS["tune_gpu_passes"][name], VARS["dflash_bench_extra_args"], MEM["model"],
                  MEM["max_total_tokens"], *gpu, MEM["draft_block"])


@pytest.mark.parametrize("gpu", [H200, H100], ids=["h200", "h100"])
@pytest.mark.parametrize("name", ["dummy", "oracle"])
def test_each_pass_is_planned_as_one_wave_from_the_deployed_flags_and_sized_for_the_card(name, gpu):
    manifest = json.loads(record_text("2026-12-03-e2e-deploy", "artifacts/manifest.json"))
    busy = merge.fingerprint_from_raw(collect.read_capture(ROOT / "tests/fixtures/captures/h200-busy-foreign"))
    opts = {k[len("dflash_bench_tune_"):]: v for k, v in VARS.items() if k.startswith("dflash_bench_tune_")}
    good = {"objective": {}, "rates": "auto", "concurrency": [1], "requests": 8, "cell_seconds": 1,
            "cell_timeout": 30, "min_rounds": 3, "max_rounds": 3, "ci_target": 0.05, "budget": 600, "server_env": {},
            "attention_backends": []}
    assert tune.check(dict(good, **{k: v for k, v in opts.items() if k in good or k == "rate_fractions"}),
                      "localhost") == []
    extra, plan, _ = sized(name, gpu)
    cfgs = mx.normalize(VARS["tune_gpu_passes"][name], None, "localhost")
    p = bp.plan("localhost", manifest, "/opt/dflash/releases/" + manifest["id"], cfgs, busy,
                [{"port": 30001, "addr": "127.0.0.1", "pid": 1}],
                {"/srv/models/hybrid-draft": {"block_size": 16, "block_size_source": "config.json"}},
                {"workloads": ["seeds"], "concurrency": VARS["dflash_bench_tune_concurrency"],
                 "port_range": [30100, 30199], "parallel": VARS["dflash_bench_parallel"],
                 "gpus": VARS["dflash_bench_gpus"], "allow_busy_gpus": VARS["dflash_bench_allow_busy_gpus"],
                 "extra_args": extra, "start_timeout": VARS["dflash_bench_start_timeout"], "cell_timeout": 40,
                 "base_instance": VARS["dflash_bench_base_instance"]})
    assert len(p["waves"]) == 1 and len(p["waves"][0]) == 3 and p["base"]["name"] == "h200-ddtree"
    for c in p["configurations"]:
        a = c["args"]
        # every server from the deployed instance's flags (the hybrid's extra_buffer, dummy weights, triton) and
        # the sizing's bounds, which win over the instance's own (its --cuda-graph-max-bs 4)
        assert arg_value(a, "--mamba-scheduler-strategy") == "extra_buffer" and arg_value(a, "--load-format") == "dummy"
        assert arg_value(a, "--attention-backend") == "triton" and has_flag(a, "--disable-piecewise-cuda-graph")
        assert arg_value(a, "--max-running-requests") == str(plan.requests)
        assert arg_value(a, "--max-mamba-cache-size") == str(plan.requests * G.SLOTS_PER_REQUEST)
        assert arg_value(a, "--max-total-tokens") == str(MEM["max_total_tokens"] * plan.requests // 8)
        assert arg_value(a, "--mem-fraction-static") == str(G.FRACTION_CAP) and c["gpus"] == [0]
    # the instances stage's rules allow every one on the lab's copy of the Qwen3.5-class hybrid
    assert tr.check_configurations(cfgs, {"name": "h200-ddtree", "model_path": "/m"}, LAB_HYBRID)[1] == {}


def test_the_h200_keeps_8_requests_a_server_and_the_h100_steps_down_to_4():
    for name in ("dummy", "oracle"):
        servers = T.servers_of(VARS["tune_gpu_passes"][name], MEM["model"], MEM["draft_block"])
        for gpu, requests in ((H200, 8), (H100, 4)):
            _, plan, needed = sized(name, gpu)
            assert plan.requests == requests, (name, gpu)
            for s in servers:  # each static pool holds what its server needs at that many requests
                assert plan.static_mib[s["name"]] >= G.need_mib(s["model"], s["args"], requests, s["verify_tokens"])
            # started together, the last to profile still gets its pools under the fraction passed
            assert needed <= G.FRACTION_CAP
    # DDTREE b15 verifies 16 tokens, b7 8, DFLASH its 16-token block; no speculation keeps no verify state
    got = {s["name"]: s["verify_tokens"] for s in T.servers_of(VARS["tune_gpu_passes"]["oracle"], "hybrid")}
    assert got == {"0:dflash": 16, "1:ddtree-15-8": 16, "2:ddtree-7-4": 8}
    assert T.servers_of([{"algorithm": "NONE"}], "hybrid")[0] == {"name": "0:none", "model": "hybrid", "args": [],
                                                                 "verify_tokens": 0}


def test_a_pass_that_cannot_fit_stops_before_any_server_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(G.GPU_ENV, "81559,12000")  # an H100 mostly taken
    out = tmp_path / "memory-dummy.json"
    assert T.main(["dummy", "--out", str(out)]) == 3
    assert not out.exists()
    err = capsys.readouterr().err
    assert "pass dummy: 3 servers do not fit this GPU: 12000 of 81559 MiB free" in err and "fit at once" in err


def test_too_many_servers_starting_at_once_are_refused_even_when_their_pools_fit():
    # 26 small dense servers share an H200: each static pool holds its server, but the last to profile its memory
    # would need more than FRACTION_CAP of what it saw free before the others took theirs
    configs = [{"algorithm": "NONE"}] * 26
    plan = G.plan(*H200_EMPTY, T.servers_of(configs, "dense"), 16384)
    assert plan.requests == 8
    with pytest.raises(G.MemoryPlanError, match="start fewer at once"):
        T.size(configs, [], "dense", 16384, *H200_EMPTY)
    args, _, needed = T.size(configs[:20], [], "dense", 16384, *H200_EMPTY)
    assert needed <= G.FRACTION_CAP and "--max-mamba-cache-size" not in args  # a dense target has no state cache



def test_main_writes_the_pass_extra_vars(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(G.GPU_ENV, ",".join(str(x) for x in H100))
    out = tmp_path / "memory-oracle.json"
    assert T.main(["oracle", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["dflash_bench_extra_args"]
    assert got[0] == "--disable-piecewise-cuda-graph"
    assert arg_value(got, "--max-running-requests") == "4" and arg_value(got, "--max-total-tokens") == "8192"
    assert "3 servers on" in capsys.readouterr().err
    # the flags tune_h200.yml would set itself are replaced, not doubled
    args, _, _ = T.size([{"algorithm": "NONE"}], ["--max-total-tokens", "1", "--sleep-on-idle"], "hybrid", 16384,
                        *H200)
    assert args.count("--max-total-tokens") == 1 and args[0] == "--sleep-on-idle"
    assert os.path.basename(T.VARS) == "tune_h200.yml"


def test_the_oracle_prompts_are_a_tune_prompts_file():
    text = "\n".join(json.dumps(x) for x in tune_oracle.prompts(8, 64, 32))
    got = pr.parse_jsonl(text, "prompts.jsonl")
    assert got["used"] == 8 and all(len(x["payload"]["input_ids"]) == 64 for x in got["prompts"])
