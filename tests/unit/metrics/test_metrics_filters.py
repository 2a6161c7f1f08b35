"""module_utils/dflash_metrics.py's alert figures (their recording values and checks) and release label, and
filter_plugins/dflash_metrics.py, the thin wrapper the role calls them through."""

from __future__ import annotations

import base64
import importlib.util
import json

from ansible.module_utils import dflash_metrics as rules
from metrics_role import ROOT

_spec = importlib.util.spec_from_file_location("dflash_metrics_filters", ROOT / "filter_plugins" / "dflash_metrics.py")
plugin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plugin)

MARGINS = {"accept_ratio": 0.85, "tokens_per_s_ratio": 0.85, "itl_ratio": 0.5}
FOR = {k: "5m" for k in rules.FOR_KEYS}
WINDOWS = {"rate": "5m", "restart": "15m", "flapping": "30m"}
LIMITS = {"kv_usage": 0.95, "queue": 0, "flapping_changes": 4, "router_error_ratio": 0.05}
FLEET = {"h1": {"instances": [{"name": "a"}, {"name": "b"}]}}


def errors(figures, **kw):
    args = {"margins": MARGINS, "for_": FOR, "windows": WINDOWS, "limits": LIMITS} | kw
    return rules.alert_errors(figures, FLEET, args["margins"], args["for_"], args["windows"], args["limits"])


def test_rows_round_the_floors_as_prometheus_reads_them():
    rows = rules.alert_rows([{"host": "h1", "instance": "b", "accept_length": 3.9, "tokens_per_s": 123.5},
                             {"host": "h1", "instance": "a", "release": "r9", "accept_length": 4,
                              "accept_ratio": 0.7}], MARGINS)
    assert [r["labels"] for r in rows] == [
        {"dflash_host": "h1", "dflash_instance": "a", "dflash_release": "r9"},
        {"dflash_host": "h1", "dflash_instance": "b"}]
    a, b = rows
    assert (a["accept_length"], a["accept_floor"]) == ("4", "2.8")
    assert a["tokens_per_s"] is None and a["tokens_per_s_floor"] is None and a["itl_ceiling"] is None
    assert (b["accept_floor"], b["tokens_per_s_floor"], b["itl_ceiling"]) == ("3.315", "104.975", "0.0161943")


def test_good_settings_have_no_errors():
    assert errors([{"host": "h1", "instance": "a", "release": "r1", "accept_length": 3, "tokens_per_s": 90},
                   {"host": "h1", "instance": "b", "tokens_per_s": 90.5, "itl_ratio": 1}]) == []


def test_each_problem_names_the_entry_and_field():
    got = errors([{"host": "h1", "instance": "a", "tokens_per_s": True, "typo": 1},
                  "h1/a",
                  {"instance": "b", "accept_length": 2},
                  {"host": "h1", "instance": "b", "accept_length": float("nan"), "release": 7}],
                 windows={"rate": "5 m", "restart": "1h30m", "flapping": "90s"},
                 limits={"kv_usage": 0, "queue": -1, "flapping_changes": 4, "router_error_ratio": 0.05})
    assert got == [
        "dflash_metrics_alert_windows.rate: '5 m' is not a Prometheus duration (e.g. 5m, 90s)",
        "dflash_metrics_alert_limits.kv_usage: 0 is not a number in (0, 1]",
        "dflash_metrics_alert_limits.queue: -1 is not a number >= 0",
        ("dflash_metrics_alert_figures[0] (h1/a): unknown field(s) typo (known: accept_length, accept_ratio, host, "
        "instance, itl_ratio, release, tokens_per_s, tokens_per_s_ratio)"),
        "dflash_metrics_alert_figures[0] (h1/a): tokens_per_s True is not a number > 0",
        "dflash_metrics_alert_figures[1]: a mapping (host, instance, accept_length, tokens_per_s), not 'h1/a'",
        "dflash_metrics_alert_figures[2]: host is missing (the inventory name of a dflash_hosts host)",
        "dflash_metrics_alert_figures[3] (h1/b): accept_length nan is not a number > 0",
        "dflash_metrics_alert_figures[3] (h1/b): release 7 is not a release id",
    ]
    assert errors({"h1": 3}) == ["dflash_metrics_alert_figures: a list of per-instance figures, not dict"]


def test_release_labels_only_on_instances_of_known_hosts():
    sd = json.dumps([{"targets": ["h1:1"], "labels": {"dflash_host": "h1", "dflash_role": "instance"}},
                     {"targets": ["h2:1"], "labels": {"dflash_host": "h2", "dflash_role": "instance"}},
                     {"targets": ["h1:2"], "labels": {"dflash_host": "h1", "dflash_role": "router"}}])
    out = json.loads(rules.release_labels(sd, {"h1": "r5", "h2": ""}))
    assert [g["labels"].get("dflash_release") for g in out] == ["r5", None, None]
    assert rules.release_labels(sd, {}).endswith("]\n")


class _Tagged(str):
    """Stands in for the tagged str subclasses Ansible 2.19 hands to filters."""


def test_the_plugin_gives_what_the_functions_give_on_ansible_values():
    f = plugin.FilterModule().filters()
    assert set(f) == {"dflash_metrics_file_sd", "dflash_metrics_release_labels", "dflash_metrics_alert_errors",
                      "dflash_metrics_alert_rows", "dflash_metrics_figure_sources", "dflash_metrics_record_figures",
                      "dflash_metrics_merge_figures", "dflash_metrics_release_ids"}
    figures = [{_Tagged("host"): _Tagged("h1"), "instance": _Tagged("a"), "accept_length": 3.9},
               {"host": "h1", "instance": "zz", "tokens_per_s": (1,)}]
    fleet = {_Tagged("h1"): {"instances": ({"name": _Tagged("a")},)}}
    got = f["dflash_metrics_alert_errors"](figures, fleet, MARGINS, FOR, WINDOWS, LIMITS)
    assert got == [
        "dflash_metrics_alert_figures[1] (h1/zz): host h1 has no instance zz (it has: a)",
        "dflash_metrics_alert_figures[1] (h1/zz): tokens_per_s [1] is not a number > 0",
    ]
    rows = f["dflash_metrics_alert_rows"](figures[:1], MARGINS)
    assert rows == rules.alert_rows([{"host": "h1", "instance": "a", "accept_length": 3.9}], MARGINS)
    assert [type(k) for k in rows[0]["labels"].values()] == [str, str]
    fleet_sd = {"h1": {"address": "10.0.0.1", "instances": [{"name": "a", "port": 30001}]}}
    sd = f["dflash_metrics_file_sd"](fleet_sd)
    assert sd == rules.file_sd(fleet_sd)
    labelled = json.loads(f["dflash_metrics_release_labels"](_Tagged(sd), {_Tagged("h1"): _Tagged("r2")}))
    assert labelled[0]["labels"]["dflash_release"] == "r2"


def _b64(obj):
    return base64.b64encode(json.dumps(obj).encode()).decode()


def test_the_figures_come_from_each_hosts_current_release():
    fleet = {"a": {"instances": [{"name": "w"}, {"name": "quiet", "metrics": False}]},
             "d": {"instances": [{"name": "mn", "nnodes": 2, "node_rank": 0}]},
             "e": {"instances": [{"name": "mn", "nnodes": 2, "node_rank": 1}]}}
    # rank 1 measures nothing; an instance without /metrics has no target to alert on
    assert rules.figure_sources(fleet) == [["a", "w"], ["d", "mn"]]
    passed = {"smoke": {"passed": True, "perf": {"accept_length_median": 4.571, "tokens_per_s_median": 500.0}}}
    records = [
        {"item": ["a", "w"], "content": _b64(passed), "encoding": "base64"},
        # a host whose record is missing (slurp failed, failed_when: false) or that did not answer
        {"item": ["b", "w"], "failed": False, "msg": "file not found: /opt/dflash/current/smoke/w.json"},
        {"item": ["c", "w"], "unreachable": True},
        # a smoke test that did not pass, and one that measured no accept length (no speculation)
        {"item": ["d", "mn"], "content": _b64({"smoke": {"passed": False, "perf": {"tokens_per_s_median": 9}}})},
        {"item": ["f", "plain"], "content": _b64({"smoke": {"passed": True, "perf": {
            "accept_length_median": None, "tokens_per_s_median": 480.5}}})},
        {"item": ["g", "w"], "content": "bm90IGpzb24="},
    ]
    currents = [{"item": "a", "stat": {"exists": True, "islnk": True,
                                       "lnk_source": "/opt/dflash/releases/20261206T170211-ab12cd34"}},
                {"item": "c", "unreachable": True}]
    got = rules.record_figures(records, currents)
    assert got == [{"host": "a", "instance": "w", "accept_length": 4.571, "tokens_per_s": 500.0,
                    "release": "20261206T170211-ab12cd34"},
                   {"host": "f", "instance": "plain", "tokens_per_s": 480.5}]
    assert rules.release_ids(currents) == {"a": "20261206T170211-ab12cd34"}
    # the inventory's own entry wins for its host and instance
    mine = [{"host": "a", "instance": "w", "accept_length": 3.0}]
    assert rules.merge_figures(got, mine) == [got[1], mine[0]]
    assert rules.merge_figures(got, []) == got
    f = plugin.FilterModule().filters()
    assert f["dflash_metrics_record_figures"](records, currents) == got
