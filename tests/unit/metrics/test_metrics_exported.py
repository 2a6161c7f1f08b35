"""roles/dflash_metrics/files/exported-metrics.yml: the metric names the pinned sglang and sglang-router
export. It is what the pinned artifacts define (scripts/extract_exported_metrics.py --check), it covers every
series the GPU runs actually scraped, and the rules, the dashboard and the lab stand-in use nothing else."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from gpu_records import record_members, record_text
from metrics_role import DASHBOARD, EXPORTED, ROOT
from promql_names import grafana_expr, metric_names


def exported() -> dict:
    return yaml.safe_load(EXPORTED.read_text())


def exported_series() -> set[str]:
    return {s for m in exported()["metrics"] for s in m["series"]}


def test_every_metric_names_where_it_is_defined():
    doc = exported()
    assert doc["sources"]["sglang"]["version"] == "0.5.11"
    assert doc["sources"]["sglang-router"]["version"] == "0.3.2"
    names = [m["name"] for m in doc["metrics"]]
    assert len(names) == len(set(names)) and len(names) > 100
    for m in doc["metrics"]:
        assert m["type"] in ("gauge", "counter", "histogram", "summary"), m
        assert m["series"], m
        if m["exporter"] == "sglang":
            assert m["name"].startswith("sglang:") and m["file"].startswith("sglang/srt/") and m["line"] > 0, m
        elif m["exporter"] == "sglang-router":
            assert m["file"].startswith("src/") and m["file"].endswith(".rs") and m["line"] > 0, m
        else:
            assert m == {"name": "up", "type": "gauge", "exporter": "prometheus", "file": None, "line": None,
                         "series": ["up"]}
    by_name = {m["name"]: m for m in doc["metrics"]}
    # the ones the rules lean on, where sglang 0.5.11 and the router 0.3.2 define them
    assert by_name["sglang:spec_accept_length"]["file"] == "sglang/srt/observability/metrics_collector.py"
    assert by_name["sglang:inter_token_latency_seconds"]["series"] == [
        "sglang:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_sum",
        "sglang:inter_token_latency_seconds_count"]
    assert by_name["sglang:process_cpu_seconds_total"]["file"] == "sglang/srt/observability/cpu_monitor.py"
    assert by_name["smg_worker_health"]["file"] == "src/observability/metrics.rs"


def test_the_list_is_what_the_pinned_wheel_and_sdist_define():
    """Regenerated from the pinned sglang wheel and sglang-router sdist (downloaded once, sha256-checked)."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "extract_exported_metrics.py"), "--check"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def _scraped(text: str) -> set[str]:
    return {re.match(r"[^{\s]+", line).group(0) for line in text.splitlines() if line and not line.startswith("#")}


def test_every_series_the_gpu_runs_scraped_is_in_the_list():
    """The /metrics of real sglang 0.5.11 instances and sglang-router 0.3.2 recorded on the H200
    (gpu-harness/records/*/raw.tar.xz)."""
    files = record_members("metrics*.txt")
    scraped = set().union(*(_scraped(record_text(r, m)) for r, m in files))
    assert len(files) >= 5 and {"sglang:spec_accept_length", "smg_worker_health"} <= scraped
    assert scraped - exported_series() == set()


def rules_names(rules_text: str) -> tuple[set[str], set[str]]:
    """(metric names the rules read, names they record themselves)."""
    groups = yaml.safe_load(rules_text)["groups"]
    used, recorded = set(), set()
    for group in groups:
        for rule in group["rules"]:
            used |= metric_names(rule["expr"])
            if "record" in rule:
                recorded.add(rule["record"])
    return used, recorded


def test_the_rules_read_only_exported_names(rendered):
    used, recorded = rules_names(rendered["rules"].read_text())
    assert recorded == {"dflash:release_accept_length", "dflash:release_accept_length_floor",
                        "dflash:release_tokens_per_s", "dflash:release_tokens_per_s_floor",
                        "dflash:release_itl_ceiling_seconds"}
    assert used - recorded - exported_series() == set()
    assert {"sglang:spec_accept_length", "sglang:gen_throughput", "sglang:token_usage", "smg_worker_health",
            "up"} <= used


def dashboard_queries(dash: dict) -> list[str]:
    """Every PromQL of the dashboard: its panels' targets and its query variables."""
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            out.append(m.group(1) if m else q)
    return out


def test_the_dashboard_reads_only_exported_names(rendered):
    dash = json.loads(DASHBOARD.read_text())
    _, recorded = rules_names(rendered["rules"].read_text())
    used = set().union(*(metric_names(grafana_expr(q)) for q in dashboard_queries(dash)))
    # besides the exported names, the release figures the rules record
    assert used - recorded - exported_series() == set()
    assert {"sglang:spec_accept_length", "sglang:gen_throughput", "sglang:time_to_first_token_seconds_bucket",
            "sglang:inter_token_latency_seconds_bucket", "sglang:num_queue_reqs", "sglang:token_usage",
            "dflash:release_accept_length"} <= used


@pytest.mark.parametrize("expr,names", [
    ('sum by (h) (rate(a_total{x="1"}[5m])) / on (h) b > bool 0', {"a_total", "b"}),
    ('histogram_quantile(0.9, sum by (le) (rate(c_bucket[$__rate_interval])))', {"c_bucket"}),
    ('max_over_time(d[10m:1m]) unless {__name__="e", k="v"} or vector(1)', {"d", "e"}),
])
def test_metric_names_of_promql(expr, names):
    assert metric_names(grafana_expr(expr)) == names


def test_metric_names_refuses_what_prometheus_refuses():
    with pytest.raises(ValueError):
        metric_names("rate(a[5m]")
    with pytest.raises(ValueError):
        metric_names('{k="v"}')
