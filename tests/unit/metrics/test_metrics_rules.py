"""The alert rules as roles/dflash_metrics renders them: promtool checks them, Prometheus's own rule unit
tests (rules.test.yml) fire each alert on some series and not on others, and the role refuses bad
settings, naming the entry and field, before it writes anything."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml
from metrics_role import FIGURES, need_promtool, run_role

TESTS = Path(__file__).resolve().parent / "rules.test.yml"
ALERTS = {"DflashInstanceDown", "DflashInstanceRestarted", "DflashTargetFlapping", "DflashAcceptLengthLow",
          "DflashSpeculationInactive", "DflashThroughputLow", "DflashInterTokenLatencyHigh", "DflashKVCacheNearFull",
          "DflashRequestsRetracted", "DflashQueueBacklog", "DflashAlertFiguresMissing", "DflashAlertFiguresStale",
          "DflashRouterDown", "DflashRouterNoHealthyWorkers", "DflashRouterWorkerUnhealthy", "DflashRouterErrors"}


def rules(rendered) -> list[dict]:
    return [r for g in yaml.safe_load(rendered["rules"].read_text())["groups"] for r in g["rules"]]


def promtool_test(rules_file: Path, test_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    shutil.copy(rules_file, tmp_path / "dflash.rules.yml")
    (tmp_path / "rules.test.yml").write_text(test_text)
    return subprocess.run([need_promtool(), "test", "rules", "rules.test.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)


def test_promtool_checks_the_rendered_rules(rendered):
    run = subprocess.run([need_promtool(), "check", "rules", str(rendered["rules"])], capture_output=True,
                         text=True, timeout=60, check=False)
    # 16 alerts and 5 recording rules for each of the two instances with figures
    assert run.returncode == 0 and "SUCCESS: 26 rules found" in run.stdout, run.stdout + run.stderr


def test_promtool_rule_unit_tests_pass(rendered, tmp_path):
    run = promtool_test(rendered["rules"], TESTS.read_text(), tmp_path)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_the_rule_tests_bite(rendered, tmp_path):
    """gpu-b/w's accept length 1 is under its floor 1.5: the test that expects silence there fails."""
    text = TESTS.read_text()
    assert text.count("values: '2x22'") == 1
    run = promtool_test(rendered["rules"], text.replace("values: '2x22'", "values: '1x22'"), tmp_path)
    assert run.returncode != 0
    assert 'alertname: DflashAcceptLengthLow, time: 11m' in run.stdout + run.stderr
    assert 'dflash_host="gpu-b"' in run.stdout + run.stderr


def test_each_alert_has_a_case_that_fires_and_one_that_does_not(rendered):
    alerts = {r["alert"] for r in rules(rendered) if "alert" in r}
    assert alerts == ALERTS
    fires, quiet = set(), set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for t in case.get("alert_rule_test", []):
            (fires if t["exp_alerts"] else quiet).add(t["alertname"])
    assert fires == ALERTS and quiet == ALERTS


def test_every_alert_has_severity_summary_description_and_a_known_duration(rendered):
    for r in rules(rendered):
        if "alert" not in r:
            continue
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
        assert "[[" not in json.dumps(r) and "]]" not in r["expr"], r["alert"]


def test_recorded_figures_follow_the_margins(rendered):
    got = {(r["record"], r["labels"]["dflash_host"]): r["expr"] for r in rules(rendered) if "record" in r}
    assert got[("dflash:release_accept_length_floor", "gpu-a")] == "vector(3.4)"  # 0.85 x 4
    assert got[("dflash:release_accept_length_floor", "gpu-b")] == "vector(1.5)"  # its own 0.5 x 3
    assert got[("dflash:release_tokens_per_s_floor", "gpu-b")] == "vector(170)"
    assert got[("dflash:release_itl_ceiling_seconds", "gpu-a")] == "vector(0.02)"  # 1 / (0.5 x 100)


def test_targets_carry_each_hosts_release(rendered):
    groups = json.loads(rendered["file_sd"].read_text())
    labels = {(g["labels"]["dflash_host"], g["labels"]["dflash_instance"]): g["labels"] for g in groups}
    assert labels[("gpu-b", "w")]["dflash_release"] == "r1" and labels[("gpu-b", "plain")]["dflash_release"] == "r1"
    assert "dflash_release" not in labels[("gpu-a", "w")]  # no release known for gpu-a in this run
    assert "dflash_release" not in labels[("gpu-a", "router")]
    assert json.loads((rendered["dashboards"] / "dflash-fleet.json").read_text())["uid"] == "dflash-fleet"


def test_release_label_from_the_deploys_fact_and_a_rerun_changes_nothing(rendered, tmp_path):
    base = {"dflash_metrics_file_sd_path": str(tmp_path / "dflash.json"), "dflash_metrics_rules_path": "",
            "dflash_metrics_prometheus_service": ""}
    facts = {"gpu-a": {"dflash_release": {"id": "r7", "path": "/opt/dflash/releases/r7"}}}
    first = run_role(tmp_path, base, host_vars=facts)
    assert first.returncode == 0, first.stdout[-3000:]
    labels = {(g["labels"]["dflash_host"], g["labels"]["dflash_instance"]): g["labels"]
              for g in json.loads((tmp_path / "dflash.json").read_text())}
    assert labels[("gpu-a", "w")]["dflash_release"] == "r7" and "dflash_release" not in labels[("gpu-b", "w")]
    assert not (tmp_path / "rules").exists()
    again = run_role(tmp_path, base, host_vars=facts)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


def test_the_same_settings_again_change_nothing(rendered):
    again = run_role(rendered["tmp"], json.loads((rendered["tmp"] / "pb.yml").read_text())[0]["roles"][0]["vars"])
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


def test_check_mode_writes_nothing(tmp_path):
    run = run_role(tmp_path, {"dflash_metrics_file_sd_path": str(tmp_path / "sd" / "dflash.json"),
                              "dflash_metrics_rules_path": str(tmp_path / "rules" / "dflash.rules.yml"),
                              "dflash_metrics_prometheus_service": "", "dflash_metrics_alert_figures": FIGURES},
                   check=True)
    assert run.returncode == 0, run.stdout[-3000:]
    assert not (tmp_path / "sd").exists() and not (tmp_path / "rules").exists()


def test_bad_settings_are_refused_before_anything_is_written(tmp_path):
    bad = [
        {"host": "gpu-x", "instance": "w", "accept_length": 3.0},
        {"host": "gpu-a", "instance": "nope", "tokens_per_s": 100},
        {"host": "gpu-b", "instance": "w", "accept_length": -1, "itl_ratio": 2},
        {"host": "gpu-b", "instance": "w", "tokens_per_s": 50},
        {"host": "gpu-b", "instance": "plain"},
    ]
    run = run_role(tmp_path, {"dflash_metrics_file_sd_path": str(tmp_path / "sd" / "dflash.json"),
                              "dflash_metrics_rules_path": str(tmp_path / "rules" / "dflash.rules.yml"),
                              "dflash_metrics_prometheus_service": "", "dflash_metrics_alert_figures": bad,
                              "dflash_metrics_alert_margins": {"accept_ratio": 1.5, "tokens_per_s_ratio": 0.85,
                                                               "itl_ratio": 0.5},
                              "dflash_metrics_alert_for": {"instance_down": "two minutes"}})
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0
    for words in ("mon: ",
                  "dflash_metrics_alert_margins.accept_ratio: 1.5 is not a number in (0, 1]",
                  "dflash_metrics_alert_for.instance_down: 'two minutes' is not a Prometheus duration",
                  "dflash_metrics_alert_for.accept_length: None is not a Prometheus duration",
                  "dflash_metrics_alert_figures[0] (gpu-x/w): host gpu-x is not in the group dflash_hosts",
                  "dflash_metrics_alert_figures[1] (gpu-a/nope): host gpu-a has no instance nope (it has: w)",
                  "dflash_metrics_alert_figures[2] (gpu-b/w): accept_length -1 is not a number > 0",
                  "dflash_metrics_alert_figures[2] (gpu-b/w): itl_ratio 2 is not a number in (0, 1]",
                  ("dflash_metrics_alert_figures[3] (gpu-b/w): the same host and instance as "
                  "dflash_metrics_alert_figures[2]"),
                  "dflash_metrics_alert_figures[4] (gpu-b/plain): neither accept_length nor tokens_per_s"):
        assert words in out, words
    assert not (tmp_path / "sd").exists() and not (tmp_path / "rules").exists()


def test_the_figures_and_release_ids_come_from_each_hosts_current_release(tmp_path):
    """The role reads gpu-a's current release (delegated, read-only): its id labels gpu-a's targets and its smoke
    record gives the rules gpu-a/w's figures; gpu-b has nothing deployed (no figures, no label); the inventory's
    own entry for gpu-b/w stays."""
    prefix = tmp_path / "opt"
    rel = prefix / "releases" / "20261206T170211-ab12cd34"
    (rel / "smoke").mkdir(parents=True)
    (rel / "smoke" / "w.json").write_text(json.dumps({"smoke": {"passed": True, "perf": {
        "accept_length_median": 4.571, "tokens_per_s_median": 500.0}}}))
    (prefix / "current").symlink_to("releases/20261206T170211-ab12cd34")
    before = sorted((p, p.stat().st_mtime_ns) for p in prefix.rglob("*"))
    base = {"dflash_metrics_file_sd_path": str(tmp_path / "dflash.json"),
            "dflash_metrics_rules_path": str(tmp_path / "rules" / "dflash.rules.yml"),
            "dflash_metrics_prometheus_service": "", "dflash_metrics_promtool": "",
            "dflash_metrics_alert_figures": [FIGURES[1]]}
    run = run_role(tmp_path, base, host_vars={"gpu-a": {"dflash_prefix": str(prefix)},
                                              "gpu-b": {"dflash_prefix": str(tmp_path / "none")}})
    assert run.returncode == 0, run.stdout[-3000:]
    assert sorted((p, p.stat().st_mtime_ns) for p in prefix.rglob("*")) == before  # read, never written
    labels = {(g["labels"]["dflash_host"], g["labels"]["dflash_instance"]): g["labels"]
              for g in json.loads((tmp_path / "dflash.json").read_text())}
    assert labels[("gpu-a", "w")]["dflash_release"] == "20261206T170211-ab12cd34"
    assert "dflash_release" not in labels[("gpu-b", "w")]
    recorded = {(r["record"], r["labels"]["dflash_host"]): (r["expr"], r["labels"].get("dflash_release"))
                for g in yaml.safe_load((tmp_path / "rules" / "dflash.rules.yml").read_text())["groups"]
                for r in g["rules"] if "record" in r}
    assert recorded[("dflash:release_accept_length", "gpu-a")] == ("vector(4.571)", "20261206T170211-ab12cd34")
    assert recorded[("dflash:release_accept_length_floor", "gpu-a")][0] == "vector(3.88535)"
    assert recorded[("dflash:release_tokens_per_s", "gpu-a")][0] == "vector(500)"
    assert recorded[("dflash:release_accept_length", "gpu-b")] == ("vector(3)", "r1")  # the inventory's entry
