#!/usr/bin/env python3
"""Build the fleet's Grafana dashboard (roles/dflash_metrics/files/dflash-fleet.dashboard.json) with
Grafana's own SDK (grafana-foundation-sdk): tok/s, accept length, TTFT / inter-token latency, queue and
KV cache per instance and per release, the release figures the alert rules compare with, targets up,
restarts and the router's workers.

Templating: datasource, host (dflash_host), instance (dflash_instance), release (dflash_release): the
labels roles/dflash_metrics puts on the file_sd targets. Metric names: only those in
roles/dflash_metrics/files/exported-metrics.yml (tests/unit/metrics/ checks).

    scripts/build_dashboard.py            # writes the JSON
    scripts/build_dashboard.py --check    # exit 1 when the committed JSON is not what this builds
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models import dashboard as models

OUT = Path(__file__).resolve().parent.parent / "roles" / "dflash_metrics" / "files" / "dflash-fleet.dashboard.json"
DS = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'dflash_host=~"$host", dflash_instance=~"$instance", dflash_release=~"$release"'
FIG = 'dflash_host=~"$host", dflash_instance=~"$instance"'  # the figures' release is the one that measured
BY = "dflash_host, dflash_instance"
INST = "{{dflash_host}}/{{dflash_instance}}"
RATE = "$__rate_interval"


def variable(name: str, label: str, query: str) -> dashboard.QueryVariable:
    return (dashboard.QueryVariable(name).label(label).datasource(DS).query(query)
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(models.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*"))


class Panels:
    """Time series panels with ids in order and refIds A, B, ... per panel."""

    def __init__(self):
        self.next_id = 1

    def ids(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def series(self, title: str, description: str, unit: str, targets: list[tuple], width: int = 12):
        """targets: (expr, legend) or (expr, legend, True) for a reference line (dashed): a release figure."""
        panel = (timeseries.Panel().id(self.ids()).title(title).description(description).datasource(DS)
                 .unit(unit).height(8).span(width).line_width(1).fill_opacity(10)
                 .legend(common.VizLegendOptions().display_mode(common_models.LegendDisplayMode.TABLE)
                         .placement(common_models.LegendPlacement.BOTTOM).show_legend(True)
                         .calcs(["lastNotNull", "mean", "max"]))
                 .tooltip(common.VizTooltipOptions().mode(common_models.TooltipDisplayMode.MULTI)
                          .sort(common_models.SortOrder.DESCENDING)))
        for i, (expr, legend, *reference) in enumerate(targets):
            ref = chr(ord("A") + i)
            panel = panel.with_target(prometheus.Dataquery().ref_id(ref).expr(expr).legend_format(legend).range())
            if reference:
                panel = panel.override_by_query(ref, [models.DynamicConfigValue(
                    id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})])
        return panel

    def row(self, title: str) -> dashboard.Row:
        return dashboard.Row(title).id(self.ids())


def quantile(q: float, metric: str) -> str:
    return f"histogram_quantile({q}, sum by (le, {BY}) (rate({metric}_bucket{{{SEL}}}[{RATE}])))"


def build() -> dict:
    p = Panels()
    flowing = f"(sum by ({BY}) (rate(sglang:generation_tokens_total{{{SEL}}}[{RATE}])) > 0)"
    d = (dashboard.Dashboard("dflash fleet: speculative decoding").uid("dflash-fleet")
         .description("SGLang instances and routers deployed by dflash-deploy: speculation, throughput, latency, "
                      "load, per instance and per release; thresholds of the alert rules (dflash:release_*).")
         .tags(["dflash", "sglang", "speculative-decoding"]).time("now-6h", "now").refresh("30s")
         .tooltip(models.DashboardCursorSync.CROSSHAIR)
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
         .with_variable(variable("host", "host", 'label_values(up{dflash_role="instance"}, dflash_host)'))
         .with_variable(variable("instance", "instance",
                                 'label_values(up{dflash_role="instance", dflash_host=~"$host"}, dflash_instance)'))
         .with_variable(variable("release", "release",
                                 'label_values(up{dflash_role="instance", dflash_host=~"$host", '
                                 'dflash_instance=~"$instance"}, dflash_release)')))

    d = d.with_row(p.row("Speculative decoding"))
    d = d.with_panel(p.series(
        "Accept length", "Tokens per verify step (accepted drafts + 1), while tokens are generated; dashed: the "
        "release's smoke figure and the alert's floor.", "none", [
            (f"max by ({BY}, dflash_release) (sglang:spec_accept_length{{{SEL}}}) and on ({BY}) {flowing}",
             INST + " {{dflash_release}}"),
            (f"max by ({BY}, dflash_release) (dflash:release_accept_length{{{FIG}}})",
             INST + " figure of {{dflash_release}}", True),
            (f"max by ({BY}) (dflash:release_accept_length_floor{{{FIG}}})", INST + " alert floor", True),
        ]))
    d = d.with_panel(p.series(
        "Accept length per release", "Mean over the selected instances of each release, while tokens are "
        "generated.", "none", [
            ((f"avg by (dflash_release) (max by ({BY}, dflash_release) (sglang:spec_accept_length{{{SEL}}}) "
             f"and on ({BY}) {flowing})"), "{{dflash_release}}"),
        ]))
    d = d.with_panel(p.series(
        "Accept rate", "Accepted drafts over proposed drafts.", "percentunit", [
            (f"max by ({BY}) (sglang:spec_accept_rate{{{SEL}}}) and on ({BY}) {flowing}", INST),
        ]))

    d = d.with_row(p.row("Throughput"))
    d = d.with_panel(p.series(
        "Generation throughput (tok/s)", "sglang's gen_throughput of the running batch; dashed: the release's "
        "one-request smoke figure.", "short", [
            (f"max by ({BY}, dflash_release) (sglang:gen_throughput{{{SEL}}})", INST + " {{dflash_release}}"),
            (f"max by ({BY}, dflash_release) (dflash:release_tokens_per_s{{{FIG}}})",
             INST + " figure of {{dflash_release}}", True),
        ]))
    d = d.with_panel(p.series(
        "Tokens generated per second, per release", "From the generation token counters.", "short", [
            (f"sum by (dflash_release) (rate(sglang:generation_tokens_total{{{SEL}}}[{RATE}]))",
             "{{dflash_release}}"),
        ]))
    d = d.with_panel(p.series(
        "Tokens per second per instance", "Generated and prompt (prefill) tokens.", "short", [
            (f"sum by ({BY}) (rate(sglang:generation_tokens_total{{{SEL}}}[{RATE}]))", INST + " generated"),
            (f"sum by ({BY}) (rate(sglang:prompt_tokens_total{{{SEL}}}[{RATE}]))", INST + " prompt"),
        ]))
    d = d.with_panel(p.series(
        "Requests per second", "Finished requests, and the ones aborted.", "reqps", [
            (f"sum by ({BY}) (rate(sglang:num_requests_total{{{SEL}}}[{RATE}]))", INST),
            (f"sum by ({BY}) (rate(sglang:num_aborted_requests_total{{{SEL}}}[{RATE}]))", INST + " aborted"),
        ]))

    d = d.with_row(p.row("Latency"))
    d = d.with_panel(p.series(
        "Time to first token", "p50 and p90.", "s", [
            (quantile(0.5, "sglang:time_to_first_token_seconds"), INST + " p50"),
            (quantile(0.9, "sglang:time_to_first_token_seconds"), INST + " p90"),
        ]))
    d = d.with_panel(p.series(
        "Inter-token latency", "Mean and p90 time between tokens of a request; dashed: the alert's ceiling "
        "(the release's smoke tok/s over the margin).", "s", [
            ((f"sum by ({BY}) (rate(sglang:inter_token_latency_seconds_sum{{{SEL}}}[{RATE}])) / sum by ({BY}) "
             f"(rate(sglang:inter_token_latency_seconds_count{{{SEL}}}[{RATE}]))"), INST + " mean"),
            (quantile(0.9, "sglang:inter_token_latency_seconds"), INST + " p90"),
            (f"max by ({BY}) (dflash:release_itl_ceiling_seconds{{{FIG}}})", INST + " alert ceiling", True),
        ]))
    d = d.with_panel(p.series(
        "End-to-end request latency", "p50 and p90.", "s", [
            (quantile(0.5, "sglang:e2e_request_latency_seconds"), INST + " p50"),
            (quantile(0.9, "sglang:e2e_request_latency_seconds"), INST + " p90"),
        ]))
    d = d.with_panel(p.series(
        "Time in queue", "p90 wait before a request is scheduled.", "s", [
            (quantile(0.9, "sglang:queue_time_seconds"), INST + " p90"),
        ]))

    d = d.with_row(p.row("Load and KV cache"))
    d = d.with_panel(p.series(
        "Running and queued requests", "sglang's scheduler: running batch and waiting queue.", "short", [
            (f"max by ({BY}) (sglang:num_running_reqs{{{SEL}}})", INST + " running"),
            (f"max by ({BY}) (sglang:num_queue_reqs{{{SEL}}})", INST + " queued"),
        ]))
    d = d.with_panel(p.series(
        "KV cache token usage", "Share of the KV cache's tokens in use; retracted requests mean it ran out.",
        "percentunit", [
            (f"max by ({BY}) (sglang:token_usage{{{SEL}}})", INST),
            (f"sum by ({BY}) (increase(sglang:num_retracted_requests_total{{{SEL}}}[{RATE}]))",
             INST + " retracted"),
        ]))

    d = d.with_row(p.row("Health"))
    d = d.with_panel(p.series(
        "Targets up", "1: Prometheus scrapes the target's /metrics (instances and routers).", "short", [
            ('up{dflash_role="instance", dflash_host=~"$host", dflash_instance=~"$instance"}',
             INST + " {{dflash_release}}"),
            ('up{dflash_role="router"}', "router on {{dflash_host}}"),
        ]))
    d = d.with_panel(p.series(
        "Restarts", "Process restarts within the last hour (counter resets of the tokenizer's CPU time).",
        "short", [
            (f'max by ({BY}) (resets(sglang:process_cpu_seconds_total{{component="tokenizer", {SEL}}}[1h]))',
             INST),
        ]))
    d = d.with_panel(p.series(
        "Router: healthy workers", "Workers the router marks healthy (0 is an outage of the endpoint).",
        "short", [
            ("count by (dflash_host) (smg_worker_health == 1)", "router on {{dflash_host}} healthy"),
            ("count by (dflash_host) (smg_worker_health == 0)", "router on {{dflash_host}} unhealthy"),
        ]))
    d = d.with_panel(p.series(
        "Router: responses per second", "By status code.", "reqps", [
            ("sum by (dflash_host, status_code) (rate(smg_http_responses_total[$__rate_interval]))",
             "router on {{dflash_host}} {{status_code}}"),
        ]))
    return json.loads(json.dumps(d.build(), cls=JSONEncoder))


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    a = ap.parse_args(argv)
    text = render()
    if a.check:
        if not a.out.is_file() or a.out.read_text() != text:
            print(f"{a.out} is not what scripts/build_dashboard.py builds: run it", file=sys.stderr)
            return 1
        return 0
    a.out.write_text(text)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
