"""The live figures of an instance from its own /metrics (the text library/dflash_status.py returned), read on the
controller with prometheus_client's parser (the exposition format's escapes, NaN/Inf and label syntax are its
job, not a home-made split).

sglang labels its scheduler gauges with the ranks (tp/pp/dp, moe_ep); one instance's figure is taken over its
series as the alert rules take it: the accept length and KV use as their maximum, throughput, running and queued
requests and the token counter as their sum. sglang keeps the last batch's accept length when idle: ``idle`` says
when nothing runs now. No Ansible import (filter_plugins/dflash_status.py calls it).
"""

from __future__ import annotations

import math

# figure -> (series name, how the series of one instance combine)
FIGURES = {
    "accept_length": ("sglang:spec_accept_length", max),
    "accept_rate": ("sglang:spec_accept_rate", max),
    "tokens_per_s": ("sglang:gen_throughput", sum),
    "running": ("sglang:num_running_reqs", sum),
    "queued": ("sglang:num_queue_reqs", sum),
    "token_usage": ("sglang:token_usage", max),
    "generation_tokens": ("sglang:generation_tokens_total", sum),
}


def samples(text: str) -> dict:
    """{series name: [values]} of a Prometheus text exposition (counters under their ``_total`` sample name)."""
    out = {}
    # imported here: this file is loaded with the status filters, which ansible-playbook's workers import for
    # every task that templates a filter; only the status and guard plays parse metrics
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text or ""):
        for s in family.samples:
            if isinstance(s.value, int | float) and math.isfinite(s.value):
                out.setdefault(s.name, []).append(float(s.value))
    return out


def live_figures(text: str | None) -> dict:
    """{accept_length, accept_rate, tokens_per_s, running, queued, token_usage, generation_tokens, idle} (a figure
    the server does not export is None); {error} when the text cannot be read."""
    if text is None:
        return {"error": "no /metrics text"}
    try:
        got = samples(text)
    except ValueError as exc:
        return {"error": f"/metrics is not Prometheus text: {exc}"}
    out = {}
    for key, (name, combine) in FIGURES.items():
        vals = got.get(name)
        out[key] = round(combine(vals), 4) if vals else None
    out["idle"] = not (out["running"] or 0) and not (out["tokens_per_s"] or 0)
    return out
