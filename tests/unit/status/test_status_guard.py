"""The guard's decision: the fallback, the evidence (an alert, or status's live figure), the perf baseline."""

from __future__ import annotations

from ansible.module_utils.dflash_instances.fields import fallback_error
from ansible.module_utils.dflash_status import guard, report
from ansible.module_utils.dflash_status.collect import collect
from status_host import ACTIVE, FakeUnits
from test_status_report import metrics


def status(h, accept):
    res = collect(h["prefix"], FakeUnits({"dflash-main.service": ACTIVE}), h["unit_dir"], disk=False,
                  health=lambda url: 200, metrics=metrics(accept))
    return report.host_report("ct200", res, [{"name": "main", "algorithm": "DFLASH"}])


def test_fallbacks():
    assert guard.fallback_of({"algorithm": "DDTREE"}) == "DFLASH"
    assert guard.fallback_of({"algorithm": "dflash"}) == "NONE"
    assert guard.fallback_of({}) == "NONE"  # DFLASH is the default algorithm
    assert guard.fallback_of({"algorithm": "NONE"}) is None
    assert guard.fallback_of({"algorithm": "DDTREE", "fallback": "none"}) == "NONE"
    assert guard.fallback_of({"algorithm": "DDTREE", "fallback": False}) is None
    inst = {"name": "w", "algorithm": "DDTREE", "ddtree": {"budget": 15}, "gpus": [0]}
    assert guard.fallback_instance(inst, "DFLASH") == {"name": "w", "algorithm": "DFLASH", "gpus": [0]}
    assert guard.fallback_instance(inst, "DDTREE")["ddtree"] == {"budget": 15}


def test_the_inventory_field_is_checked():
    assert fallback_error({"fallback": "DFLASH"}, "DDTREE") is None
    assert fallback_error({"fallback": False}, "DDTREE") is None
    assert fallback_error({}, "DDTREE") is None
    assert fallback_error({"fallback": "EAGLE"}, "DDTREE") == ("'EAGLE' is not one of DFLASH, DDTREE, NONE (or false: "
                                                               "the guard never moves this instance)")
    assert fallback_error({"fallback": "ddtree"}, "DDTREE") == "ddtree is the instance's own algorithm"


def test_a_server_that_generated_nothing_yet_is_not_moved(host):
    res = collect(host["prefix"], FakeUnits({"dflash-main.service": ACTIVE}), host["unit_dir"], disk=False,
                  health=lambda url: 200, metrics=metrics(0.0, generated=0))
    st = report.host_report("ct200", res, [{"name": "main", "algorithm": "DFLASH"}])
    d = guard.decide("ct200", st, "main", {"name": "main", "algorithm": "DFLASH"})
    assert not d["act"] and d["message"] == ("ct200/main: no token generated since the server started: no accept "
                                             "length yet; nothing deployed")


def test_status_live_figure_below_the_release_moves_it(host):
    d = guard.decide("ct200", status(host, 2.05), "main", {"name": "main", "algorithm": "DFLASH"})
    assert d["act"] and d["from"] == "DFLASH" and d["to"] == "NONE" and d["baseline"] is None
    assert d["override"] == {"name": "main", "algorithm": "NONE"}
    assert d["message"] == ("ct200/main: status: live accept length 2.05 < floor 3.88 = 0.85 x 4.57 measured by its "
                            "release's smoke test -> deploying its fallback NONE (was DFLASH) as a new release with "
                            "every gate; no earlier release here ran it with NONE: its performance gate has no "
                            "comparable measurement")
    assert d["evidence"]["release"] == host["id"] and d["evidence"]["floor"] == 3.885


def test_an_alert_is_the_evidence_and_is_named(host):
    d = guard.decide("ct200", status(host, 4.5), "main", {"name": "main", "algorithm": "DFLASH"},
                     alert="DflashAcceptLengthLow", alert_value="2.0312")
    assert d["act"] and d["cause"] == "alert DflashAcceptLengthLow at 2.0312; status now: live accept length 4.5"
    other = guard.decide("ct200", status(host, 4.5), "main", {"name": "main"}, alert="DflashKVCacheNearFull")
    assert not other["act"] and "is not about acceptance" in other["message"]


def test_nothing_to_do(host):
    st = status(host, 4.5)
    held = guard.decide("ct200", st, "main", {"name": "main", "algorithm": "DFLASH"})
    assert not held["act"] and held["message"] == ("ct200/main: acceptance holds: live accept length 4.50 >= floor "
                                                   "3.88; nothing deployed")
    moved = guard.decide("ct200", st, "main", {"name": "main", "algorithm": "DDTREE"}, alert="DflashAcceptLengthLow")
    assert not moved["act"] and "already runs DFLASH while the inventory says DDTREE" in moved["message"]
    off = guard.decide("ct200", st, "main", {"name": "main", "fallback": False}, alert="DflashAcceptLengthLow")
    assert not off["act"] and "fallback: false in the inventory" in off["message"]
    assert not guard.decide("ct200", st, "other", None)["act"]
    assert guard.decide("ct200", {"verdict": "unreachable"}, "main", {})["message"].startswith(
        "ct200/main: the host did not answer")
    forced = guard.decide("ct200", st, "main", {"name": "main"}, force=True)
    assert forced["act"] and forced["cause"].startswith("asked for (guard_force=true)")


def test_the_perf_baseline_is_the_last_healthy_release_with_the_fallbacks_algorithm():
    releases = [{"id": "r1", "status": "healthy", "algorithms": {"w": "DFLASH"}},
                {"id": "r2", "status": "failed", "algorithms": {"w": "DFLASH"}},
                {"id": "r3", "status": "healthy", "algorithms": {"w": "DDTREE"}}]
    assert guard.baseline(releases, "w", "DFLASH") == "r1"
    assert guard.baseline(releases, "w", "NONE") is None
