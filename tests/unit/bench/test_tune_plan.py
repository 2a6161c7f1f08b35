"""tune.yml's planning (module_utils/dflash_bench/tune.py): its variables checked, the sweep with backends and
env as bench configurations, load points and the auto rates, the interleaved round order, the records and the
after-round evaluation; the instance rules over the configurations (tune_rules.py); the proposal as a diff of
the user's inventory (proposal.py)."""

import json
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench import proposal as prop
from ansible.module_utils.dflash_bench import tune
from ansible.module_utils.dflash_bench import tune_rules as tr
from ansible.module_utils.dflash_instances import model as dm

ROOT = Path(__file__).resolve().parents[3]
LAB_HYBRID = dm.target_facts((ROOT / "lab/models/Qwen3.6-27B/config.json").read_text())
NEMOTRON_H = dm.target_facts(json.dumps({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                                         "num_hidden_layers": 8, "hybrid_override_pattern": "M-M*M-M-"}))
GOOD = {"objective": {"ttft_ms": 500, "itl_ms": 40}, "rates": "auto", "concurrency": [1, 4], "requests": 32,
        "cell_seconds": 30, "cell_timeout": 120, "min_rounds": 3, "max_rounds": 8, "ci_target": 0.05,
        "budget": 3600, "server_env": {}, "attention_backends": []}


def test_the_tune_variables_every_error_at_once():
    assert tune.check(GOOD, "ct200") == []
    bad = dict(GOOD, rates=[2, -1], concurrency=[0], requests=2, min_rounds=9, max_rounds=4, ci_target=1.5,
               server_env=[], attention_backends="triton", objective={"ttft_ms": 0})
    errs = tune.check(bad, "ct200")
    for text in ("ct200: dflash_bench_tune_objective: field 'ttft_ms': 0 must be a positive number",
                 "ct200: dflash_bench_tune_rates: [2, -1] must be 'auto' or a list of request rates > 0",
                 "ct200: dflash_bench_tune_concurrency: [0] must be a list of integers 1..256",
                 "ct200: dflash_bench_tune_requests: 2 must be a whole number from 4 to 100000",
                 "ct200: dflash_bench_tune_min_rounds: 9 is above dflash_bench_tune_max_rounds 4",
                 "ct200: dflash_bench_tune_ci_target: 1.5 must be a fraction in (0, 1)",
                 "ct200: dflash_bench_tune_server_env: must be a mapping",
                 "ct200: dflash_bench_tune_attention_backends: 'triton' must be a list of backend names"):
        assert any(e.startswith(text) for e in errs), (text, errs)
    assert any("'auto' takes its rates from the closed-loop cells" in e
               for e in tune.check(dict(GOOD, concurrency=[]), "h"))


def test_the_sweep_with_backends_and_env_is_a_bench_matrix():
    configs, sweep = tune.with_backends([{"algorithm": "NONE"}, {"algorithm": "DFLASH", "attention_backend": "fa3"}],
                                        {"algorithm": ["DDTREE"], "budget": [7, 15]}, ["triton", "flashinfer"])
    configs = tune.with_env(configs, {"SGLANG_DDTREE_ORACLE": "/o.json"})
    names = [c["name"] for c in mx.normalize(configs, sweep)]
    assert names == ["none-triton", "none-flashinfer", "dflash-fa3", "ddtree-b7-k8-triton",
                     "ddtree-b7-k8-flashinfer", "ddtree-b15-k8-triton", "ddtree-b15-k8-flashinfer"]
    assert all(c["env"] == {"SGLANG_DDTREE_ORACLE": "/o.json"} for c in configs)
    assert tune.with_backends([{"algorithm": "NONE"}], {}, []) == ([{"algorithm": "NONE"}], {})


def test_load_points_and_auto_rates():
    loads = tune.load_points([8, 0.5], [4, 1], 32, 30)
    assert [tune.load_key(x) for x in loads] == ["c1", "c4", "r0.5", "r8"]
    assert [x["requests"] for x in loads] == [32, 32, 15, 32]  # 0.5 req/s fills 30 s with 15
    assert tune.describe_load(loads[2]) == "open loop, 0.5 req/s"
    closed = [{"requests": [{"ok": True}] * 20, "wall_s": 2.0}, {"requests": [{"ok": True}] * 30 + [{"ok": False}],
                                                                 "wall_s": 1.5}]
    assert tune.auto_rates(closed) == [5.0, 10.0, 15.0, 20.0, 25.0]  # best: 30 completed in 1.5 s
    assert tune.auto_rates([{"requests": [], "wall_s": 1}]) == []


def test_round_order_interleaves_and_rotates():
    loads = [{"kind": "concurrency", "value": 1}, {"kind": "rate", "value": 2.0}]
    r1 = tune.round_order(["a", "b", "c"], loads, 1)
    r2 = tune.round_order(["a", "b", "c"], loads, 2)
    assert [n for n, _ in r1] == ["a", "b", "c", "a", "b", "c"] and [n for n, _ in r2][:3] == ["b", "c", "a"]
    assert [tune.load_key(x) for _, x in r1] == ["c1"] * 3 + ["r2"] * 3
    assert tune.cell_id("ddtree-b15-k8", loads[1], 3) == "ddtree-b15-k8__r2__r3"


def rec(name, load, rnd, good, n=10):
    reqs = [{"ok": True, "ttft": 0.01 if i < good else 5.0, "itl": [0.001] * 4, "latency": 0.05,
             "completion_tokens": 5, "sent_at": i * 0.1} for i in range(n)]
    return tune.record({"run": "r"}, {"name": name, "algorithm": "NONE", "args": []},
                       {"load": load, "requests": reqs, "wall_s": 1.0, "status": "ok"}, rnd)


def test_records_and_the_evaluation_after_a_round(tmp_path):
    rate = {"kind": "rate", "value": 10.0, "requests": 10}
    closed = {"kind": "concurrency", "value": 2, "requests": 10}
    tune.write_records(tmp_path, [rec("a", rate, 1, 10), rec("b", rate, 1, 5), rec("a", closed, 1, 10),
                                  tune.failure_record({"run": "r"}, {"name": "c", "args": []},
                                                      {"stage": "start", "msg": "boom",
                                                       "diagnosis": {"cause": "cuda_oom", "remedy": "less"}})])
    got = tune.read_records(tmp_path)
    assert sorted(r["cell"] for r in got) == ["a__c2__r1", "a__r10__r1", "b__r10__r1", "c__start"]
    assert tune.grouped(got)["a"]["r10"]["rounds"][0]["round"] == 1
    ev = tune.evaluate(tmp_path, ["a", "b"], {"ttft_ms": 100, "itl_ms": None}, 1, {"min_rounds": 2})
    assert ev["deciding"]["a"]["mean"] == 10.0 and ev["deciding"]["b"]["mean"] == 5.0
    assert ev["stop"] is False and ev["lines"][0].startswith("a: goodput 10 req/s at open loop, 10 req/s")
    for k in (2, 3):
        tune.write_records(tmp_path, [rec("a", rate, k, 10), rec("b", rate, k, 4 + k % 2)])
    ev = tune.evaluate(tmp_path, ["a", "b"], {"ttft_ms": 100, "itl_ms": None}, 3, {"min_rounds": 2,
                                                                                   "ci_target": 0.05})
    # a serves every request in every round: its interval is a point; b is clear below it, out of the race
    assert ev["stop"] and ev["reason"] == "ci" and ev["verdict"]["contenders"] == ["a"]
    tune.append_round(tmp_path, {"round": 3, "stop": True})
    assert json.loads((tmp_path / "rounds.jsonl").read_text())["stop"] is True


# ------------------------------------------------------------------ the instance rules over the configurations


def test_rules_leave_out_what_deploy_would_refuse():
    inst = {"name": "main", "algorithm": "DFLASH", "model_path": "/m", "pin_flags": {"--sampling-backend": "pytorch"}}
    configs = mx.normalize([{"algorithm": "NONE"}, {"algorithm": "DFLASH", "attention_backend": "triton"},
                            {"algorithm": "DDTREE", "mode": "shadow-linear", "attention_backend": "flashinfer"},
                            {"algorithm": "DDTREE", "attention_backend": "flashinfer"},
                            {"algorithm": "DDTREE", "attention_backend": "triton"}])
    ok, refused = tr.check_configurations(configs, inst, NEMOTRON_H, "ct200")
    assert [c["name"] for c in ok] == ["none", "ddtree-b15-k8-shadow-linear-flashinfer"]
    assert refused["dflash-triton"].startswith("ct200: configuration dflash-triton: field 'pin_flags': "
                                               "--attention-backend triton: sglang 0.5.11 refuses it on "
                                               "NemotronHForCausalLM")
    # Mamba2 layers: DDTREE's tree verify is refused whatever the backend (shadow-linear verifies a chain)
    assert "field 'ddtree.mode': DDTREE tree verify on NemotronHForCausalLM" in refused["ddtree-b15-k8-flashinfer"]
    assert "ddtree-b15-k8-triton" in refused
    # the lab's Qwen3.5-class hybrid (Gated DeltaNet) takes every one of them
    assert tr.check_configurations(configs, inst, LAB_HYBRID)[1] == {}
    # the instance tune would propose: the user's fields kept, the configuration's set
    new = tr.as_instance(inst, configs[3])
    assert new["ddtree"] == {"budget": 15, "topk": 8, "mode": "tree"} and new["pin_flags"] == {
        "--sampling-backend": "pytorch", "--attention-backend": "flashinfer"}
    assert "ddtree" not in tr.as_instance(new, configs[0]) and tr.as_instance(new, configs[0])["algorithm"] == "NONE"


def test_dummy_weights_from_the_release_flags_or_the_instance():
    assert tr.load_format(["--model-path", "/m", "--load-format", "dummy"]) == "dummy"
    assert tr.load_format(["--load-format=dummy"]) == "dummy"
    assert tr.load_format([], {"extra_args": ["--load-format", "dummy"]}) == "dummy"
    assert tr.load_format(["--model-path", "/m"]) is None


# ------------------------------------------------------------------ the proposal as a diff of the inventory

HOST_VARS = """---
# ct200: the seeds' host (a comment the diff keeps)
dflash_instances:
  - name: main
    gpus: [1]
    port: 30001
    algorithm: DFLASH   # today's choice
    model_path: /m
    draft_model_path: /d
    ddtree: {budget: 15, topk: 8}
  - name: other
    gpus: [2]
    port: 30002
    algorithm: DFLASH
    model_path: /m
    draft_model_path: /d
"""
DDTREE_B7 = mx.normalize([{"algorithm": "DDTREE", "budget": 7, "topk": 4}])[0]


def inventory(tmp_path, files):
    for rel, text in files.items():
        p = tmp_path / "inv" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return [str(tmp_path / "inv")]


def test_the_proposal_is_a_diff_of_the_file_that_defines_the_instance(tmp_path):
    src = inventory(tmp_path, {"hosts.yml": "all:\n  hosts:\n    ct200:\n", "host_vars/ct200.yml": HOST_VARS})
    current = yaml.safe_load(HOST_VARS)["dflash_instances"]
    got = prop.propose(src, "ct200", ["dflash_hosts"], "main", DDTREE_B7, current, rel_to=str(tmp_path))
    assert got["changed"] and got["file"] == "inv/host_vars/ct200.yml"
    lines = got["diff"].splitlines()
    assert lines[:2] == ["--- a/inv/host_vars/ct200.yml", "+++ b/inv/host_vars/ct200.yml"]
    assert sorted(x for x in lines if x[:1] in "+-" and x[:3] not in ("---", "+++")) == sorted([
        "-    algorithm: DFLASH   # today's choice", "+    algorithm: DDTREE   # today's choice",
        "-    ddtree: {budget: 15, topk: 8}", "+    ddtree: {budget: 7, topk: 4, mode: tree}"])
    # the rest of the file, comments and the other instance, is untouched; the diff applies
    import subprocess

    patched = tmp_path / "patched.yml"
    patched.write_text(HOST_VARS)
    subprocess.run(["patch", "-s", str(patched)], input=got["diff"], text=True, check=True)
    new = yaml.safe_load(patched.read_text())["dflash_instances"]
    assert new[0]["algorithm"] == "DDTREE" and new[0]["ddtree"] == {"budget": 7, "topk": 4, "mode": "tree"}
    assert new[1] == current[1] and got["instances"][0] == new[0]


def test_the_proposal_finds_group_vars_and_inventory_host_vars(tmp_path):
    group = HOST_VARS.replace("# ct200", "# every lab host")
    src = inventory(tmp_path, {"hosts.yml": "all:\n  children:\n    lab:\n      hosts:\n        ct200: {}\n",
                               "group_vars/lab.yml": group})
    current = yaml.safe_load(group)["dflash_instances"]
    got = prop.propose(src, "ct200", ["dflash_hosts", "lab"], "other", DDTREE_B7, current, rel_to=str(tmp_path))
    assert got["file"] == "inv/group_vars/lab.yml" and "+    algorithm: DDTREE" in got["diff"]
    inline = ("all:\n  children:\n    gpu:\n      hosts:\n        ct200:\n          dflash_instances:\n"
              "            - {name: main, gpus: [1], port: 30001, algorithm: DFLASH, model_path: /m}\n")
    src = inventory(tmp_path / "b", {"hosts.yml": inline})
    got = prop.propose(src, "ct200", ["gpu"], "main", mx.normalize([{"algorithm": "NONE"}])[0],
                       [{"name": "main", "algorithm": "DFLASH"}], rel_to=str(tmp_path / "b"))
    assert got["file"] == "inv/hosts.yml" and "algorithm: NONE" in got["diff"]


def test_no_file_no_change_no_instance(tmp_path):
    current = [{"name": "main", "algorithm": "DFLASH", "model_path": "/m", "api_key": "s3cret"}]
    got = prop.propose([str(tmp_path)], "ct200", [], "main", DDTREE_B7, current)
    assert got["changed"] and got["diff"] == "" and "no inventory file of ct200 defines instance main" in got["note"]
    assert "algorithm: DDTREE" in got["snippet"] and "s3cret" not in got["snippet"]
    same = prop.propose([str(tmp_path)], "ct200", [], "main", mx.normalize([{"algorithm": "DFLASH"}])[0], current)
    assert not same["changed"] and "already runs this configuration" in same["note"]
    none = prop.propose([str(tmp_path)], "ct200", [], "gone", DDTREE_B7, current)
    assert not none["changed"] and "has no instance 'gone'" in none["note"]


@pytest.mark.parametrize("text, want", [("dflash_instances:\n- name: a\n", (2, 2, 0)),
                                        ("dflash_instances:\n    - name: a\n", (2, 6, 4))])
def test_indentation_is_the_files(text, want):
    assert prop._indent_of(text) == want


# ------------------------------------------------------------------ tune-apply.yml: a run's choice deployed later


def tune_run(tmp_path, verdict="winner", best="ddtree-b7-k4", host="ct200", release="20261206T000000-aaaa"):
    run_dir = tmp_path / "reports" / "tune" / "r1"
    run_dir.mkdir(parents=True)
    configs = [dict(DDTREE_B7, name="ddtree-b7-k4"), {"name": "main", "running": "main"},
               dict(mx.normalize([{"algorithm": "NONE"}])[0], name="none")]
    (run_dir / "run.json").write_text(json.dumps({"run": "r1", "host": host, "release": {"id": release},
                                                  "base_instance": "main", "plan": {"configurations": configs}}))
    (run_dir / "results.json").write_text(json.dumps({"choice": {"verdict": verdict, "best": {"name": best},
                                                                 "text": f"{best}: 12.0 req/s [11.5, 12.5]"}}))
    return str(run_dir)


def test_apply_takes_the_runs_choice_into_the_hosts_instances(tmp_path):
    current = yaml.safe_load(HOST_VARS)["dflash_instances"]
    got = prop.apply_plan(tune_run(tmp_path), "ct200", current, "20261206T000000-aaaa")
    assert got["errors"] == []
    assert got["instances"][0]["algorithm"] == "DDTREE" and got["instances"][0]["ddtree"] == {
        "budget": 7, "topk": 4, "mode": "tree"}
    assert got["instances"][1] == current[1] and current[0]["algorithm"] == "DFLASH"  # the input is not changed
    assert got["lines"][0] == "ct200: instance main -> ddtree-b7-k4: ddtree-b7-k4: 12.0 req/s [11.5, 12.5]"
    assert "inventory.diff" in got["lines"][1]


def test_apply_refuses_every_other_case_at_once_and_changes_nothing(tmp_path):
    current = yaml.safe_load(HOST_VARS)["dflash_instances"]
    got = prop.apply_plan(tune_run(tmp_path, verdict="no_winner", host="ct201"), "ct200", current,
                          "20261207T000000-bbbb")
    assert got["instances"] == current and got["lines"] == []
    assert [e.split(":", 2)[1].strip() for e in got["errors"]] == [
        "tune run r1 measured ct201, not this host",
        ("tune run r1 measured release 20261206T000000-aaaa; the host runs 20261207T000000-bbbb now, so the figures "
         "may no longer hold"),
        "tune run r1"]
    assert "(-l ct201)" in got["errors"][0] and "tune again" in got["errors"][1]
    assert "no clear choice" in got["errors"][2]
    # the best is the running instance as it is; the inventory lacks the base instance; no release served
    assert "the running instance main as it is" in prop.apply_plan(
        tune_run(tmp_path / "a", best="main"), "ct200", current, "20261206T000000-aaaa")["errors"][0]
    assert "has no instance 'main'" in prop.apply_plan(
        tune_run(tmp_path / "b"), "ct200", current[1:], "20261206T000000-aaaa")["errors"][0]
    assert "runs no release now" in prop.apply_plan(tune_run(tmp_path / "c"), "ct200", current, None)["errors"][0]


def test_apply_when_the_inventory_already_runs_it_or_the_folder_is_not_a_run(tmp_path):
    current = yaml.safe_load(HOST_VARS)["dflash_instances"]
    done = prop.apply_plan(tune_run(tmp_path), "ct200", current, "20261206T000000-aaaa")["instances"]
    again = prop.apply_plan(tune_run(tmp_path / "a"), "ct200", done, "20261206T000000-aaaa")
    assert again["errors"] == [("ct200: instance main already runs ddtree-b7-k4 in the inventory: nothing to deploy "
                               "(a plain deploy.yml deploys the inventory as written)")]
    missing = prop.apply_plan(str(tmp_path / "nope"), "ct200", current, None)
    assert len(missing["errors"]) == 1 and "not a finished tune run" in missing["errors"][0]
    assert "-e tune_run=reports/tune/<run>" in missing["errors"][0]
