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
H100_EMPTY = (81559, 80000)  # the deployed instance stopped (as gpu-harness/upgrade.sh and ddtree_0517.sh leave it)
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
    assert len(p["waves"]) == 1 and len(p["waves"][0]) == len(cfgs) and p["base"]["name"] == "h200-ddtree"
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


def test_the_h200_keeps_8_requests_a_server_and_the_h100_steps_down_to_4_beside_the_deployed_instance():
    # the dummy pass's 3 servers beside the deployed instance on an H100: 4 requests each; the oracle pass's 2 and
    # either pass on a GPU the deployed instance left free: 8
    for name, h100 in (("dummy", 4), ("oracle", 8)):
        servers = T.servers_of(VARS["tune_gpu_passes"][name], MEM["model"], MEM["draft_block"])
        for gpu, requests in ((H200, 8), (H100, h100), (H100_EMPTY, 8), (H200_EMPTY, 8)):
            _, plan, needed = sized(name, gpu)
            assert plan.requests == requests, (name, gpu)
            for s in servers:  # each static pool holds what its server needs at that many requests
                assert plan.static_mib[s["name"]] >= G.need_mib(s["model"], s["args"], requests, s["verify_tokens"])
            # started together, the last to profile still gets its pools under the fraction passed
            assert needed <= G.FRACTION_CAP
    # DDTREE b15 verifies 16 tokens, b7 8, DFLASH its 16-token block; no speculation keeps no verify state
    got = {s["name"]: s["verify_tokens"] for s in T.servers_of(VARS["tune_gpu_passes"]["oracle"], "hybrid")}
    assert got == {"0:dflash": 16, "1:ddtree-15-8": 16}
    assert T.servers_of([{"algorithm": "DDTREE", "budget": 7, "topk": 4}], "hybrid")[0]["verify_tokens"] == 8
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
    out = tmp_path / "memory-dummy.json"
    assert T.main(["dummy", "--out", str(out)]) == 0
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


def test_the_oracle_reference_comes_from_the_first_server_without_speculation_once_it_answers():
    # sglang's /get_server_info: speculative_algorithm at the top (0.5.11) or under server_args
    assert tune_oracle.speculative({"speculative_algorithm": None}) is None
    assert tune_oracle.speculative({"server_args": {"speculative_algorithm": "DDTREE"}}) == "DDTREE"
    t = [0.0]
    up = {30100: {"speculative_algorithm": "DFLASH"}}

    def info(url, timeout=2.0):
        port = int(url.rsplit(":", 1)[1])
        if port not in up:
            raise ConnectionRefusedError(port)
        return up[port]

    def sleep(s):  # the NONE server comes up on the third poll
        t[0] += s
        if t[0] >= 2:
            up[30102] = {"speculative_algorithm": None}

    got = tune_oracle.find_plain(range(30100, 30104), 10, clock=lambda: t[0], sleep=sleep, info=info)
    assert got == "http://127.0.0.1:30102" and t[0] == 2
    t[0] = 0.0
    assert tune_oracle.find_plain([30100], 3, clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s),
                                  info=info) is None


def test_the_summary_judges_each_pass_against_what_the_issue_expects(tmp_path):
    import tune_summary as S

    def entry(name, algo, mean, low, high):
        return {"name": name, "algorithm": algo, "load": {"kind": "rate", "value": 4.0},
                "ci": {"n": 3, "mean": mean, "low": low, "high": high}}

    runs = {"tune-dummy": {"verdict": "speculation_does_not_pay", "text": "speculation does not pay here",
                           "best": entry("none", "NONE", 5.0, 4.8, 5.2),
                           "runner_up": entry("dflash", "DFLASH", 2.0, 1.9, 2.1), "ranking": ["none", "dflash"]},
            "tune-oracle": {"verdict": "no_winner", "text": "no winner",
                            "best": entry("ddtree-b15-k8", "DDTREE", 5.0, 3.0, 7.0),
                            "runner_up": entry("dflash", "DFLASH", 4.0, 3.5, 4.5), "ranking": []}}
    steps = []
    for run, choice in runs.items():
        d = tmp_path / "runs" / run
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({"choice": choice, "dummy": True, "tables": [
            {"id": "accept", "title": "Accepted tokens per step", "columns": ["configuration", "mean"],
             "rows": [["dflash", "1.00"]]}]}))
        (d / "run.json").write_text(json.dumps({"release": {"id": "r7"}}))
        (d / "rounds.jsonl").write_text('{"round": 1}\n{"round": 2, "reason": "budget"}\n')
        steps.append({"pass": run[5:], "run": run, "rc": 0, "seconds": 170, "limit_s": 182, "budget_s": 122,
                      "sglang": "0.5.17", "skipped": None})
    steps.append({"pass": "extra", "run": "", "rc": None, "skipped": "no oracle reference"})
    meta = {"meta": {"reference": "the dummy pass's NONE server", "gpu": "NVIDIA H100 80GB HBM3", "sglang": "0.5.17"}}
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in [meta] + steps))
    assert S.main([str(tmp_path), str(tmp_path)]) == 0
    got = json.loads((tmp_path / "summary.json").read_text())["passes"]
    assert [p["met"] for p in got] == [True, False, None]
    assert got[0]["rounds"] == 2 and got[0]["stop"] == "budget" and got[0]["release"] == "r7"
    md = (tmp_path / "summary.md").read_text()
    assert "## Pass dummy" in md and "**MET**" in md and "**NOT MET**" in md and "Skipped: no oracle reference" in md
    assert "Oracle reference: the dummy pass's NONE server. GPU NVIDIA H100 80GB HBM3" in md
    assert "none at rate=4.0: 5 [4.8, 5.2] (n=3)" in md and "| dflash | 1.00 |" in md
    # no speculation in the oracle pass as well: the choice among the speculative configurations decides
    both = {"verdict": "winner", "best": {"algorithm": "NONE"},
            "speculative": {"verdict": "winner", "best": {"algorithm": "DDTREE"}}}
    assert S.expectation("oracle", both)["met"] is True
