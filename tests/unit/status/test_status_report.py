"""Verdicts, the table and the document on the controller, from what collect() read on a host."""

from __future__ import annotations

import copy
import json
import os

from ansible.module_utils.dflash_status import report
from ansible.module_utils.dflash_status.collect import collect
from status_host import ACTIVE, FakeUnits, deploy

INV = [{"name": "main", "algorithm": "DFLASH"}]


def metrics(accept, generated=1024):
    text = ("# TYPE sglang:spec_accept_length gauge\n"
            f'sglang:spec_accept_length{{model_name="q",tp_rank="0"}} {accept}\n'
            "# TYPE sglang:gen_throughput gauge\n"
            'sglang:gen_throughput{model_name="q",tp_rank="0"} 0.0\n'
            "# TYPE sglang:generation_tokens_total counter\n"
            f'sglang:generation_tokens_total{{model_name="q"}} {generated}\n')
    return lambda url: (text, None)


def read(h, states=None, health=200, accept=4.571, generated=1024, **kw):
    return collect(h["prefix"], FakeUnits(states if states is not None else {"dflash-main.service": ACTIVE}),
                   h["unit_dir"], disk=kw.pop("disk", False), health=lambda url: health,
                   metrics=metrics(accept, generated), **kw)


def test_a_healthy_host(host):
    r = report.host_report("ct200", read(host), INV)
    assert r["verdict"] == "healthy" and r["findings"] == []
    spec = r["instances"]["main"]["speculation"]
    assert spec["floor"] == round(4.571 * 0.85, 3) and not spec["collapsed"] and spec["live"]["accept_length"] == 4.571
    assert "metrics_text" not in r["instances"]["main"] and r["instances"]["main"]["fallback"] == "NONE"
    doc = report.document({"ct200": r})
    assert doc["ok"] and doc["summary"] == {"verdicts": {"healthy": ["ct200"]}, "instances": 1, "collapsed": []}
    text = report.text(doc)
    assert text.splitlines()[0] == "DFLASH STATUS: 1 host(s), 1 instance(s); healthy 1"
    row = text.splitlines()[2].split()
    assert row[:5] == ["ct200", "main", host["id"], "(healthy)", "0.5.11"] and row[-1] == "healthy"
    assert "4.57/4.57" in row and "rules that fired: sm120-attention-triton; fallback: NONE" in text
    json.dumps(doc)  # the document is JSON as it is


def test_a_stopped_instance_is_unhealthy(host):
    r = report.host_report("ct200", read(host, states={}, health=None), INV)
    assert r["verdict"] == "unhealthy"
    assert [f["what"] for f in r["findings"]] == ["unit dflash-main.service is inactive/dead"]
    assert not report.document({"ct200": r})["ok"]


def test_health_not_answering_and_restarts(host):
    r = report.host_report("ct200", read(host, states={"dflash-main.service": dict(ACTIVE, NRestarts=2)}, health=503),
                           INV)
    what = [(f["severity"], f["what"]) for f in r["findings"]]
    assert ("unhealthy", "/health at http://127.0.0.1:30001 answers 503") in what
    assert any(s == "warning" and w.startswith("systemd restarted it 2 time(s)") for s, w in what)


def test_collapsed_acceptance_is_unhealthy_and_names_the_guard(host):
    r = report.host_report("ct200", read(host, accept=2.05), INV)
    assert r["verdict"] == "unhealthy"
    f = r["findings"][0]
    assert f["guard"] and f["what"] == ("speculation collapsed: live accept length 2.05 < floor 3.88 = 0.85 x 4.57 "
                                        "measured by its release's smoke test")
    doc = report.document({"ct200": r})
    assert doc["summary"]["collapsed"] == ["ct200/main"]
    assert "guard: ansible-playbook playbooks/guard.yml -l ct200 -e instance=main" in report.text(doc)
    # a wider margin (the lab's, whose stand-in reports the last request's figure) holds it
    assert report.host_report("ct200", read(host, accept=2.9), INV, {"accept_ratio": 0.6})["verdict"] == "healthy"
    # a server restarted a moment ago has generated nothing: it reads 0, which is no figure yet, not a collapse
    fresh = report.host_report("ct200", read(host, accept=0.0, generated=0), INV)
    assert fresh["verdict"] == "healthy" and not fresh["instances"]["main"]["speculation"]["collapsed"]
    assert fresh["instances"]["main"]["speculation"]["why"].startswith("no token generated since the server started")


def test_drift_makes_a_drifted_host_with_the_lines(host):
    with open(os.path.join(host["unit_dir"], "dflash-main.service"), "a", encoding="utf-8") as fh:
        fh.write("Nice=5\n")
    r = report.host_report("ct200", read(host), INV)
    assert r["verdict"] == "drifted"
    text = report.text(report.document({"ct200": r}))
    assert f"DRIFT: main: unit {host['unit_dir']}/dflash-main.service: differs from what release {host['id']} " \
           "put live: +Nice=5" in text
    assert "      +Nice=5" in text


def test_the_release_and_the_activation_and_the_inventory(host):
    res = read(host)
    res2 = copy.deepcopy(res)
    res2["release"]["status"] = "unknown"
    res2["activation"] = {"state": "current", "release": host["id"], "started": "2026-12-06T17:00:00Z",
                          "controller": "ops@ctl"}
    r = report.host_report("ct200", res2, INV + [{"name": "new", "algorithm": "DDTREE"}])
    what = [f["what"] for f in r["findings"]]
    assert r["verdict"] == "unhealthy"
    assert what[0].startswith(f"an activation of {host['id']} is unfinished (state current")
    assert what[1].startswith(f"release {host['id']} is unknown: its smoke test never passed")
    assert what[2].startswith("in the inventory, not in the current release")


def test_an_unreachable_host_and_the_document():
    r = report.host_report("ct129", None, unreachable="the host does not answer (ssh to ct129): timed out")
    doc = report.document({"ct129": r})
    assert r["verdict"] == "unreachable" and not doc["ok"]
    assert "ct129: UNREACHABLE" in report.text(doc)
    assert "UNREACHABLE: the host does not answer (ssh to ct129): timed out" in report.text(doc)


def test_disk_line(tmp_path):
    h = deploy(tmp_path)
    text = report.text(report.document({"ct200": report.host_report("ct200", read(h, disk=True), INV)}))
    line = next(ln for ln in text.splitlines() if ln.startswith("  disk: "))
    assert "layers 1 (" in line and "trees 1 (" in line and "releases 1 (" in line and " free of " in line
    assert report.size(1536) == "1.5 KiB" and report.size(3 * 1024 ** 3) == "3.0 GiB"
