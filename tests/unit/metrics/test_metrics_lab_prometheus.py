"""A real Prometheus (Debian's, the lab image's) loads the targets and rules roles/dflash_metrics renders,
scrapes a lab stand-in and fires DflashAcceptLengthLow once the stand-in's accept length drops
(POST /lab/fault low_accept) while a client keeps it generating; the alert names the release's figure.
What molecule/fleet's monitoring host does, on this machine, in about half a minute."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.request

import pytest
from metrics_role import need_promtool, run_role
from test_standin import BASE_ARGS, SPEC_ARGS, Server, free_port, jpost

SHORT_FOR = {"instance_down": "5s", "router_down": "5s", "accept_length": "4s", "speculation_inactive": "4s",
             "tokens_per_s": "4s", "itl": "4s", "kv_cache": "4s", "queue": "4s", "router_no_workers": "4s",
             "router_worker_unhealthy": "4s", "router_errors": "4s", "figures": "4s"}


def api(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as resp:
        return json.load(resp)["data"]


def alerts(port, name):
    return [a for a in api(port, "alerts")["alerts"] if a["labels"]["alertname"] == name]


def wait_for(what, check, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def lab(tmp_path):
    prometheus = need_promtool("prometheus")
    srv = Server([*BASE_ARGS, *SPEC_ARGS, "--enable-metrics"], {"DFLASH_STANDIN_TOKENS_PER_S": "4000"})
    srv.wait_listening()
    procs, stop = [srv], threading.Event()
    try:
        fleet = {"lab": [{"name": "w", "port": srv.port, "algorithm": "DFLASH", "host": "127.0.0.1"}]}
        run = run_role(tmp_path, {
            "dflash_metrics_file_sd_path": str(tmp_path / "dflash.json"),
            "dflash_metrics_rules_path": str(tmp_path / "dflash.rules.yml"),
            "dflash_metrics_prometheus_service": "", "dflash_metrics_promtool": need_promtool(),
            "dflash_metrics_release_ids": {"lab": "r1"},
            # the stand-in's smoke figure; its per-request accept length varies, hence a wider margin
            "dflash_metrics_alert_figures": [{"host": "lab", "instance": "w", "release": "r1", "accept_length": 4.2,
                                              "tokens_per_s": 4000, "accept_ratio": 0.7}],
            "dflash_metrics_alert_for": SHORT_FOR,
        }, fleet=fleet)
        assert run.returncode == 0, run.stdout[-3000:]
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": [str(tmp_path / "dflash.rules.yml")],
            "scrape_configs": [{"job_name": "dflash", "file_sd_configs": [
                {"files": [str(tmp_path / "dflash.json")], "refresh_interval": "1s"}]}]}))
        prom = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(prom)

        def client():
            i = 0
            while not stop.is_set():
                try:
                    jpost(srv.base + "/generate", {"text": f"q{i}", "sampling_params": {"max_new_tokens": 256}})
                except OSError:
                    pass  # the stand-in stopping at the end of the test
                i += 1
                time.sleep(0.05)

        def listening():
            if prom.poll() is not None:
                pytest.fail(f"prometheus exited {prom.returncode}: {prom.stderr.read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return True
            except OSError:
                return False

        threading.Thread(target=client, daemon=True).start()
        wait_for("Prometheus to listen", listening)
        yield srv, port
    finally:
        stop.set()
        for p in procs:
            if isinstance(p, Server):
                p.stop()
            else:
                p.terminate()
                p.wait(timeout=20)


def test_prometheus_loads_the_rules_and_the_accept_length_alert_fires(lab):
    srv, port = lab
    def evaluated():
        groups = api(port, "rules")["groups"]
        names = {g["name"] for g in groups}
        return names if len(names) == 3 and all(r["health"] == "ok" for g in groups for r in g["rules"]) else None

    assert wait_for("every rule evaluated without error", evaluated) == {
        "dflash-release-figures", "dflash-instances", "dflash-routers"}
    target = wait_for("the stand-in scraped", lambda: [t for t in api(port, "targets")["activeTargets"]
                                                       if t["health"] == "up"])[0]
    assert target["labels"]["dflash_release"] == "r1" and target["labels"]["dflash_instance"] == "w"
    wait_for("tokens flowing, accept length over the floor", lambda: api(
        port, "query?query=" + urllib.request.quote(
            'sglang:spec_accept_length > 3.5 and on (dflash_host, dflash_instance) '
            'rate(sglang:generation_tokens_total[5m]) > 0'))["result"])
    time.sleep(5)  # longer than the alert's 4s: nothing fires while the accept length is normal
    assert alerts(port, "DflashAcceptLengthLow") == []
    assert jpost(srv.base + "/lab/fault", {"fault": "low_accept"})[0] == 200
    firing = wait_for("DflashAcceptLengthLow firing", lambda: [a for a in alerts(port, "DflashAcceptLengthLow")
                                                               if a["state"] == "firing"])
    alert = firing[0]
    assert alert["labels"] == {"alertname": "DflashAcceptLengthLow", "dflash_host": "lab", "dflash_instance": "w",
                               "severity": "warning"}
    assert float(alert["value"]) < 2.94  # under the floor 0.7 x 4.2
    assert "release r1 measured 4.20 in its smoke test (floor 2.94)" in alert["annotations"]["description"]
    assert alerts(port, "DflashSpeculationInactive") == [] and alerts(port, "DflashInstanceDown") == []
