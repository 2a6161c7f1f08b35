"""The metric names a PromQL expression reads, with a real PromQL parser (promql-parser: Python bindings of
GreptimeTeam's Rust parser), so that names inside functions, ranges, subqueries and `{__name__="..."}`
selectors are all found and an expression Prometheus would refuse fails here too."""

from __future__ import annotations

import re

import promql_parser

# Grafana's interval variables are not PromQL: a range of the same syntax stands in for them
GRAFANA_INTERVALS = re.compile(r"\$\{?__(rate_interval|interval|range)\}?")


def metric_names(expr: str) -> set[str]:
    """Every metric name the expression selects (a selector without an exact name is an error)."""
    names: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            name = node.name or next((m.value for m in node.matchers.matchers
                                      if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal), None)
            if not name:
                raise ValueError(f"a selector without a metric name in {expr!r}: {node}")
            names.add(name)

    promql_parser.walk(promql_parser.parse(expr), pre_visit=visit)
    return names


def grafana_expr(expr: str) -> str:
    """A dashboard query as PromQL: Grafana's $__rate_interval and friends as a plain range."""
    return GRAFANA_INTERVALS.sub("5m", expr)
