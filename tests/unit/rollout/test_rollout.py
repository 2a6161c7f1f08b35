"""Rollout batches and summary (module_utils/dflash_rollout/batches.py), the rollout filters and the summary
callback."""

import json

import pytest
from ansible.module_utils.dflash_rollout import batches as ro

# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize("hosts, serial, want", [
    ("abcde", [1, "25%"], [["a"], ["b"], ["c"], ["d"], ["e"]]),
    ("abcde", [1, 2, 2], [["a"], ["b", "c"], ["d", "e"]]),
    ("abcdefghij", [1, "50%"], [["a"], list("bcdef"), list("ghij")]),
    ("abcde", ["100%"], [list("abcde")]),
    ("abcde", [], [list("abcde")]),
    ("abcde", 2, [["a", "b"], ["c", "d"], ["e"]]),
    ("ab", [1, "25%"], [["a"], ["b"]]),  # 25% of 2 is 0: at least one host, as Ansible
])
def test_batches_are_ansibles(hosts, serial, want):
    assert ro.batches(list(hosts), serial) == want


# --------------------------------------------------------------------------- summary

def test_summary_rows():
    rows = ro.summary(
        ["a", "b", "c", "d", "e"],
        before={"a": "R1a", "b": "R1b", "c": "R1c", "d": None, "e": "R1e"},
        after={"a": {"id": "R2a", "smoked": ["w"]}, "b": {"id": "R1b", "smoked": []}},
        failures={"c": "Put the previous release back: c: release R2c failed its smoke test: crash -- rolled back "
                       "to R1c (smoke test passed)",
                  "d": "c: release R2d failed its smoke test: x -- no previous release: the failed instances were stopped"},
        batch_list=[["a"], ["b", "c"], ["d", "e"]], started={"a", "b", "c", "d"})
    by = {r["host"]: r for r in rows}
    assert by["a"]["after"] == "R2a" and by["a"]["verdict"] == "healthy (new release, restarted w)"
    assert by["b"]["verdict"] == "healthy (unchanged)" and by["b"]["batch"] == 2
    assert by["c"]["after"] == "R1c" and by["c"]["verdict"].startswith("FAILED: Put the previous release back")
    assert by["d"]["after"] is None
    assert by["e"]["after"] == "R1e" and by["e"]["verdict"].startswith("not deployed")
    lines = ro.summary_lines(rows)
    assert lines[0].split() == ["host", "batch", "release", "before", "release", "after", "verdict"]
    assert len(lines) == 6


def test_summary_never_calls_an_untested_or_uncreated_release_healthy():
    rec = {"release": "R2", "smoked": ["w"], "verdict": "healthy", "why": "never smoke-tested",
           "msg": "current R2 (never smoke-tested) restarted and smoke-tested: w"}
    rows = ro.summary(
        ["chk", "chk2", "untested", "recovered", "recovered2"],
        before={"chk": "R1", "chk2": "R1", "untested": "R2", "recovered": "R2", "recovered2": "R2"},
        after={"chk": {"id": "R9", "smoked": ["w"], "check": True, "created": True, "status": "unknown"},
               "chk2": {"id": "R1", "smoked": [], "check": True, "status": "healthy"},
               "untested": {"id": "R2", "smoked": [], "status": "unknown"},
               "recovered": {"id": "R2", "smoked": [], "status": "healthy", "recovered": rec},
               "recovered2": {"id": "R3", "smoked": ["w"], "status": "healthy", "recovered": rec}},
        failures={}, batch_list=[["chk", "chk2", "untested", "recovered", "recovered2"]])
    by = {r["host"]: r for r in rows}
    # --check: the release does not exist; the host is where it was
    assert by["chk"]["after"] == "R1"
    assert by["chk"]["verdict"] == "check mode, nothing changed: would create release R9, restart w"
    assert by["chk2"]["verdict"] == "check mode, nothing changed: nothing would change"
    assert by["untested"]["verdict"] == "NOT PROVEN: release R2 has no passed smoke test (status unknown)"
    assert by["recovered"]["verdict"] == ("healthy (smoke-tested on recovery: current R2 (never smoke-tested) "
                                          "restarted and smoke-tested: w)")
    assert by["recovered2"]["verdict"] == ("healthy (new release, restarted w); first current R2 (never "
                                           "smoke-tested) restarted and smoke-tested: w")
    fixed = ro.summary(["a"], {"a": "R1"}, {"a": {"id": "R1", "smoked": ["w"], "status": "healthy", "repairs": [
        "unit file /etc/systemd/system/dflash-w.service was edited on the host (...): put back"]}}, {})
    assert fixed[0]["verdict"] == ("healthy (restarted w); REPAIRED: unit file /etc/systemd/system/dflash-w.service "
                                   "was edited on the host (...): put back")


def test_later_hosts_let_go_of_their_lock_when_a_batch_fails():
    assert ro.later_hosts([["a"], ["b", "c"], ["d"]], "a") == ["b", "c", "d"]
    assert ro.later_hosts([["a"], ["b", "c"], ["d"]], "c") == ["d"]
    assert ro.later_hosts([["a"], ["b", "c"], ["d"]], "d") == []
    assert ro.later_hosts([], "a") == []


def test_summary_host_stopped_mid_batch():
    rows = ro.summary(["a", "b"], {"a": "R1", "b": "R1"}, {}, {"a": "boom"}, [["a", "b"]], started={"a", "b"})
    assert rows[1]["verdict"].startswith("STOPPED during its batch")


# --------------------------------------------------------------------------- filters and the summary callback

def test_rollout_filters_read_the_inventory_like_ansible_hands_it():
    from test_filters import load_plugin
    f = load_plugin("dflash_rollout").FilterModule().filters()
    hostvars = {
        "fl-a": {"ansible_host": "mol-fl-a", "dflash_instances": [{"name": "w", "port": 30001}],
                 "dflash_instances_bind_host": "0.0.0.0",
                 "ansible_facts": {"hostname": "fl-a", "all_ipv4_addresses": ["10.88.0.2"]}},
        "fl-b": {"dflash_fleet_address": "10.0.0.2", "dflash_instances": [{"name": "w", "port": 30001, "host": "::"}],
                 "dflash_router_port": 8000},
        "fl-c": {},
    }
    fleet = f["dflash_rollout_fleet"](hostvars, ["fl-a", "fl-b", "fl-c"])
    assert fleet["fl-a"]["address"] == "mol-fl-a" and fleet["fl-b"]["address"] == "10.0.0.2"
    assert fleet["fl-c"] == {"address": "fl-c", "bind": "127.0.0.1", "instances": []}
    assert [w["url"] for w in f["dflash_router_workers"](fleet)] == ["http://mol-fl-a:30001", "http://10.0.0.2:30001"]
    assert f["dflash_rollout_router_endpoints"](hostvars, ["fl-a", "fl-b"]) == [["fl-a", 30000], ["fl-b", 8000]]
    assert f["dflash_rollout_addresses"](hostvars, ["fl-a"])["fl-a"] == ["10.88.0.2", "fl-a", "mol-fl-a"]
    assert f["dflash_router_reach_errors"](f["dflash_router_workers"](fleet), hostvars, ["fl-a"]) == []
    assert "the router on fl-a cannot reach it" in f["dflash_router_reach_errors"](
        f["dflash_router_workers"](f["dflash_rollout_fleet"](hostvars, ["fl-a", "fl-c"]) | {
            "fl-c": {"address": "fl-c", "bind": "127.0.0.1", "instances": [{"name": "w", "port": 30001}]}}),
        hostvars, ["fl-a"])[0]
    assert f["dflash_router_api_key"](fleet, f["dflash_router_workers"](fleet)) is None
    assert f["dflash_rollout_batches"](["fl-a", "fl-b", "fl-c"], [1, "50%"]) == [["fl-a"], ["fl-b"], ["fl-c"]]
    assert f["dflash_multinode_check"](fleet, ["fl-a", "fl-b", "fl-c"])["errors"] == []


def test_summary_callback_collects_and_prints(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location(
        "dflash_rollout_cb", Path(__file__).resolve().parents[3] / "callback_plugins" / "dflash_rollout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cb = mod.CallbackModule()
    shown = []
    cb._display = SimpleNamespace(banner=shown.append, display=shown.append)

    def result(host, res, task="t"):
        return SimpleNamespace(_host=SimpleNamespace(get_name=lambda: host), _result=res,
                               _task=SimpleNamespace(get_name=lambda: task))

    plan = {"hosts": ["a", "b", "c"], "serial": [1, 2], "max_fail_percentage": 0, "batches": [["a"], ["b", "c"]]}
    cb.v2_playbook_on_play_start(SimpleNamespace(get_name=lambda: "Check every host before anything changes"))
    for h in "abc":
        cb.v2_runner_on_ok(result(h, {"ansible_facts": {"dflash_rollout_plan": plan,
                                                         "dflash_rollout_before": {"release": f"R1{h}"}}}))
    cb.v2_playbook_on_play_start(SimpleNamespace(get_name=lambda: "Roll out in batches (a canary host first), ..."))
    cb.v2_runner_on_ok(result("a", {"ansible_facts": {"dflash_rollout_result": {"id": "R2a", "smoked": ["w"]}}}))
    cb.v2_runner_on_failed(result("b", {"msg": "b: release R2b failed its smoke test: x -- rolled back to R1b "
                                              "(smoke test passed)"}, task="Fail with the diagnosis"))
    cb.v2_runner_on_ok(result("c", {}))
    monkeypatch.setenv("DFLASH_ROLLOUT_SUMMARY", str(tmp_path / "s.json"))
    cb.v2_playbook_on_stats(None)
    text = "\n".join(map(str, shown))
    assert "DFLASH ROLLOUT SUMMARY" in text and "R2a" in text
    rows = {r["host"]: r for r in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert rows["a"]["verdict"] == "healthy (new release, restarted w)"
    assert rows["b"]["after"] == "R1b" and rows["b"]["verdict"].startswith("FAILED: Fail with the diagnosis")
    assert rows["c"]["verdict"].startswith("STOPPED during its batch")


def test_summary_keeps_the_end_of_a_long_failure():
    msg = "Fail with the diagnosis: fl-a: release R2 failed its smoke test: " + "x" * 900 + \
        " -- rolled back to R1 (smoke test passed)"
    row = ro.summary(["fl-a"], {"fl-a": "R1"}, {}, {"fl-a": msg})[0]
    assert row["after"] == "R1" and row["verdict"].endswith("rolled back to R1 (smoke test passed)")
    assert len(row["verdict"]) < 420


def test_summary_reads_the_rescues_words():
    """The rescue of a failed smoke test says "put back: current -> R; ..." (revert.yml): the row's
    release after the run is R, and a first deploy with nothing to put back has none."""
    msg = ("fl-a: instance mn: smoke failed: release R2 (previous R1): gate perf.tokens_per_s failed -- "
           "put back: current -> R1; stopped: dflash-new.service; serving now (checked): mn 200")
    row = ro.summary(["fl-a"], {"fl-a": "R0"}, {}, {"fl-a": msg})[0]
    assert row["after"] == "R1" and "put back: current -> R1" in row["verdict"]
    first = ("fl-b: smoke failed -- put back: current -> none (first deploy: no previous release); "
             "serving now (checked): nothing")
    assert ro.summary(["fl-b"], {"fl-b": None}, {}, {"fl-b": first})[0]["after"] is None
