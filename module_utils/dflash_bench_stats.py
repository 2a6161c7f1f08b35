"""Figures of one benchmark cell from its requests, the way sglang.bench_serving defines them.

* output tok/s    all completion tokens / wall time of the cell (first request sent to last done)
* TTFT            time from sending a request to its first streamed chunk with tokens
* ITL             time between two streamed chunks divided by the tokens the later one added
* accept length   completion tokens / verify steps (``spec_verify_ct``), over the cell's requests,
                  from the server's own meta_info; the server's /metrics gauge and its
                  avg_spec_accept_length are kept beside it.
Pure functions; no Ansible import.
"""

from __future__ import annotations

import math

PERCENTILES = (50, 90, 99)


def percentile(values, q):
    """Linear-interpolated percentile (numpy's default method); None for no values."""
    vals = sorted(float(v) for v in values if v is not None)
    if not vals:
        return None
    k = (len(vals) - 1) * float(q) / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi:
        return vals[int(k)]
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def _ms(value):
    return None if value is None else round(value * 1000.0, 3)


def parse_prometheus(text) -> dict:
    """Prometheus text -> {metric name: value}, summed over label sets (one set per TP rank 0 here)."""
    out = {}
    for line in str(text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0].strip()
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def summarize(requests, wall_seconds) -> dict:
    """The cell's figures from its request records ({ok, ttft, itl, latency, completion_tokens,
    prompt_tokens, cached_tokens, spec_verify_ct, ...})."""
    ok = [r for r in requests if r.get("ok")]
    tokens = sum(int(r.get("completion_tokens") or 0) for r in ok)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in ok)
    cached = sum(int(r.get("cached_tokens") or 0) for r in ok)
    verify = [r for r in ok if r.get("spec_verify_ct")]
    verify_ct = sum(int(r["spec_verify_ct"]) for r in verify)
    verify_tokens = sum(int(r.get("completion_tokens") or 0) for r in verify)
    itls = [x for r in ok for x in (r.get("itl") or [])]
    wall = float(wall_seconds or 0)
    out = {
        "requests": len(requests),
        "completed": len(ok),
        "failed": len([r for r in requests if not r.get("ok") and not r.get("skipped")]),
        "skipped": len([r for r in requests if r.get("skipped")]),
        "wall_s": round(wall, 3),
        "output_tokens": tokens,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_ratio": round(cached / prompt, 4) if prompt else None,
        "output_tok_s": round(tokens / wall, 2) if wall > 0 and tokens else None,
        "request_s": round(len(ok) / wall, 3) if wall > 0 and ok else None,
        "spec_verify_ct": verify_ct or None,
        "accept_length": round(verify_tokens / verify_ct, 3) if verify_ct else None,
    }
    for q in PERCENTILES:
        out[f"ttft_p{q}_ms"] = _ms(percentile([r.get("ttft") for r in ok], q))
        out[f"itl_p{q}_ms"] = _ms(percentile(itls, q))
        out[f"e2e_p{q}_ms"] = _ms(percentile([r.get("latency") for r in ok], q))
    return out


def ratio(new, old):
    """new / old rounded, None when either is missing or old is 0."""
    if new is None or old in (None, 0):
        return None
    return round(float(new) / float(old), 3)
