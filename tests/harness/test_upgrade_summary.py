"""gpu-harness/upgrade_summary.py: each step of gpu-harness/upgrade.sh judged from its playbook log and the state read
after it (the releases, the current manifest, the smoke record's performance gate, what the server says it is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import upgrade_summary as U

RECAP = """
PLAY RECAP *********************************************************************
localhost                  : ok=103  changed={changed}    unreachable=0    failed=0    skipped=40   rescued=0    ignored=0
"""


def state(current, version, releases, gate=None):
    return {"current": current,
            "releases": [{"id": r, "status": s} for r, s in releases],
            "manifest": {"id": current, "tree": {"sglang_version": version},
                         "instances": {"h200-ddtree": {"sglang_version": version}}},
            "smoke": {"h200-ddtree": {"smoke": {"gates": [gate] if gate else []}}},
            "served": {"h200-ddtree": {"version": version}}}


def steps():
    r1, r2 = "20261207T100000-aaaaaaaa", "20261207T100500-bbbbbbbb"
    gate = {"gate": "perf.tokens_per_s", "ran": True, "passed": True, "figure": 80.1, "baseline": 85.0,
            "baseline_release": r1}
    both = [(r1, "healthy"), (r2, "healthy")]
    return r1, r2, [
        {"step": "deploy511", "rc": 0, "seconds": 150, "log_text": RECAP.format(changed=21),
         "state": state(r1, "0.5.11", [(r1, "healthy")])},
        {"step": "upgrade", "rc": 0, "seconds": 160, "log_text": RECAP.format(changed=18),
         "state": state(r2, "0.5.17", both, gate)},
        {"step": "again", "rc": 0, "seconds": 50, "log_text": RECAP.format(changed=0), "state": state(r2, "0.5.17", both, gate)},
        {"step": "rollback", "rc": 0, "seconds": 80, "log_text": "", "state": state(r1, "0.5.11", both)},
        {"step": "forward", "rc": 0, "seconds": 85, "log_text": "", "state": state(r2, "0.5.17", both, gate)},
    ]


def test_a_good_run_passes_every_step():
    _r1, _r2, run = steps()
    rows = U.judge(run, "0.5.11", "0.5.17")
    assert [r["step"] for r in rows] == ["deploy511", "upgrade", "again", "rollback", "forward"]
    assert all(r["passed"] for r in rows), [r["checks"] for r in rows]
    assert rows[2]["recap"] == {"ok": 103, "changed": 0, "unreachable": 0, "failed": 0}
    text = U.markdown(rows, "0.5.11", "0.5.17")
    assert "all steps passed: True" in text and "passed 80.1 vs 85.0" in text


def test_what_each_step_must_show():
    _r1, r2, run = steps()
    run[1]["state"]["served"]["h200-ddtree"]["version"] = "0.5.11"  # the server did not change
    run[1]["state"]["smoke"]["h200-ddtree"]["smoke"]["gates"] = []  # no perf gate ran
    run[2]["log_text"] = RECAP.format(changed=2)  # the re-run changed something
    run[3]["state"]["current"] = r2  # the rollback did not move current
    rows = {r["step"]: r for r in U.judge(run, "0.5.11", "0.5.17")}
    assert not rows["upgrade"]["checks"]["serves 0.5.17"]
    assert not rows["upgrade"]["checks"]["perf gate against the first release"]
    assert not rows["again"]["checks"]["changed=0"]
    assert not rows["rollback"]["checks"]["back on the first release"] and rows["forward"]["passed"]
    assert "FAIL: serves 0.5.17, perf gate against the first release" in U.markdown(list(rows.values()), "0.5.11",
                                                                                      "0.5.17")


def test_the_script_reads_its_steps_file(tmp_path):
    _r1, _r2, run = steps()
    with open(tmp_path / "steps.jsonl", "w") as fh:
        for s in run:
            (tmp_path / f"{s['step']}.log").write_text(s["log_text"])
            (tmp_path / f"{s['step']}.state.json").write_text(json.dumps(s["state"]))
            fh.write(json.dumps({"step": s["step"], "rc": s["rc"], "seconds": s["seconds"], "log": f"{s['step']}.log",
                                 "state": f"{s['step']}.state.json"}) + "\n")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "gpu-harness", "upgrade_summary.py"), str(tmp_path),
                          "0.5.11", "0.5.17"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["steps"][4]["passed"]
    assert "all steps passed: True" in (tmp_path / "summary.md").read_text()


def test_the_upgrade_instance_is_the_inventorys_without_graphs():
    import yaml

    with open(os.path.join(ROOT, "gpu-harness", "upgrade-vars.yml")) as fh:
        ours = yaml.safe_load(fh)["dflash_instances"][0]
    with open(os.path.join(ROOT, "inventory", "gpu", "group_vars", "all", "main.yml")) as fh:
        inv = yaml.safe_load(fh)
    theirs = inv["dflash_instances"][0]
    assert {k: v for k, v in ours.items() if k != "extra_args"} == {k: v for k, v in theirs.items() if k != "extra_args"}
    assert ours["extra_args"] == ["--load-format", "dummy", "--disable-cuda-graph"]


def test_a_run_that_reuses_an_earlier_calls_release():
    """STAGES without deploy511 (the 0.5.11 release deployed by the call before): the upgrade's manifest names the
    release it replaced, which the rollback must come back to."""
    r1, _r2, run = steps()
    run[1]["state"]["manifest"]["previous"] = r1
    rows = U.judge(run[1:], "0.5.11", "0.5.17")
    assert all(r["passed"] for r in rows), [r["checks"] for r in rows]
