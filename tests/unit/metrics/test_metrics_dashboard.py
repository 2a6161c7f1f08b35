"""roles/dflash_metrics/files/dflash-fleet.dashboard.json: built by scripts/build_dashboard.py, valid as
Grafana's own SDK reads a dashboard, with panels, targets, datasource, ids and variables a Grafana can load.
(Its metric names: test_metrics_exported.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from metrics_role import DASHBOARD, ROOT

PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "table", "bargauge", "heatmap", "text"}


def dash() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_the_committed_json_is_what_the_builder_builds():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_dashboard.py"), "--check"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr


def test_grafana_sdk_reads_it_back_unchanged():
    """Grafana's SDK models every field of a dashboard: a field it does not know would be lost."""
    d = dash()
    assert json.loads(json.dumps(Dashboard.from_json(d), cls=JSONEncoder)) == d


def test_dashboard_level_fields():
    d = dash()
    assert d["uid"] == "dflash-fleet" and d["title"] and "id" not in d  # importable anywhere: no numeric id
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    assert d["time"] == {"from": "now-6h", "to": "now"} and d["refresh"]


def test_panels_ids_layout_datasource_targets():
    d = dash()
    ids = [p["id"] for p in d["panels"]]
    assert all(isinstance(i, int) and i > 0 for i in ids) and len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0 and g["y"] >= 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["title"] and p["description"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and all(re.fullmatch(r"[A-Z]", r) for r in refs), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["legendFormat"], (p["title"], t)
        for o in p["fieldConfig"]["overrides"]:
            assert o["matcher"] == {"id": "byFrameRefID", "options": o["matcher"]["options"]}
            assert o["matcher"]["options"] in refs, p["title"]
    titles = {p["title"] for p in d["panels"]}
    for wanted in ("Accept length", "Accept length per release", "Generation throughput (tok/s)",
                   "Time to first token", "Inter-token latency", "Running and queued requests",
                   "KV cache token usage", "Router: healthy workers"):
        assert wanted in titles


def test_variables_host_instance_release_and_every_use_defined():
    d = dash()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert list(variables) == ["datasource", "host", "instance", "release"]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name, label in (("host", "dflash_host"), ("instance", "dflash_instance"), ("release", "dflash_release")):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*"
        assert re.fullmatch(rf"label_values\(up\{{.*\}}, {label}\)", v["query"]), v["query"]
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    used = set()
    for p in d["panels"]:
        for t in p.get("targets", []):
            used |= set(re.findall(r"\$(\w+)", t["expr"]))
    for v in variables.values():
        used |= set(re.findall(r"\$(\w+)", str(v.get("query"))))
    assert used - {"__rate_interval"} <= set(variables), used
    assert {"host", "instance", "release"} <= used
