"""Performance gates of the smoke test: several short generations, their medians, and the
previous release's medians on the same host and instance.

The seeds judged a release by its speed too (123.5 tok/s DFlash; DDTree must beat it): a release
30% slower than the one it replaces is a failed release. One request can be noisy, so
``measure`` runs ``samples`` greedy /generate requests of a fixed length (``ignore_eos``) and the
medians are compared. Where the server reports ``meta_info.e2e_latency`` that is the time used
(no HTTP noise); otherwise the client's wall time. Either way the record says which.

A release's measurement is stored in its smoke record (``<release>/smoke/<instance>.json``, key
``smoke.perf``); ``find_baseline`` walks back from the previous release (manifest ``previous``
links) to the newest one that passed its smoke test with a measurement made under the same
conditions (prompt, length, model, timing source, stand-in or not).

Pure functions plus reading JSON files; no Ansible import.
"""

from __future__ import annotations

import json
import os
import statistics

MAX_HOPS = 20


class PerfError(Exception):
    """A sample request failed."""


def median(values):
    vals = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return round(statistics.median(vals), 3) if vals else None


def sample_body(prompt, max_new_tokens, input_ids=None) -> dict:
    """One greedy /generate request of exactly max_new_tokens (ignore_eos)."""
    body = {"sampling_params": {"temperature": 0, "max_new_tokens": int(max_new_tokens), "ignore_eos": True}}
    if input_ids is not None:
        body["input_ids"] = list(input_ids)
    else:
        body["text"] = prompt
    return body


def parse_sample(status, out, client_seconds) -> dict:
    """A sample from a /generate answer: tokens, seconds, tokens_per_s, accept_length."""
    if isinstance(out, list) and out:
        out = out[0]
    if status != 200 or not isinstance(out, dict):
        raise PerfError(f"/generate: HTTP {status}: {str(out)[:200]}")
    mi = out.get("meta_info") or {}
    tokens = mi.get("completion_tokens")
    if not isinstance(tokens, int) or tokens <= 0:
        tokens = len(out.get("output_ids") or [])
    if tokens <= 0:
        raise PerfError(f"/generate returned no tokens: {str(out)[:200]}")
    e2e = mi.get("e2e_latency")
    server = isinstance(e2e, int | float) and not isinstance(e2e, bool) and e2e > 0
    seconds = float(e2e) if server else float(client_seconds)
    verify = mi.get("spec_verify_ct")
    accept = mi.get("spec_accept_length")
    if accept is None and isinstance(verify, int | float) and verify > 0:
        accept = tokens / verify
    return {
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "client_seconds": round(float(client_seconds), 4),
        "timing": "server" if server else "client",
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
        "accept_length": round(float(accept), 3) if isinstance(accept, int | float) else None,
        "spec_verify_ct": verify,
    }


def measure(http, base_url, body, samples, timeout, clock) -> dict:
    """Run ``samples`` requests; {samples: [...], tokens_per_s_median, accept_length_median,
    tokens_per_s_range, timing}. Raises PerfError on a failed request."""
    got = []
    for _ in range(int(samples)):
        t = clock()
        status, out = http("POST", base_url + "/generate", body, timeout)
        got.append(parse_sample(status, out, clock() - t))
    tps = [s["tokens_per_s"] for s in got if s["tokens_per_s"] is not None]
    timing = {s["timing"] for s in got}
    return {
        "samples": got,
        "tokens_per_s_median": median(tps),
        "tokens_per_s_range": [min(tps), max(tps)] if tps else None,
        "accept_length_median": median([s["accept_length"] for s in got]),
        "timing": timing.pop() if len(timing) == 1 else "mixed",
    }


def conditions(args, prompt, max_new_tokens, timing, stand_in) -> dict:
    """What must be the same for two measurements to be compared. ``stand_in``: what a server that is not sglang
    says it is (None for sglang, as in records written before the field: those stay comparable)."""
    model = None
    args = [str(a) for a in args or []]
    for i, a in enumerate(args):
        if a in ("--model-path", "--model") and i + 1 < len(args):
            model = args[i + 1]
    return {"prompt": prompt, "max_new_tokens": int(max_new_tokens), "model_path": model,
            "timing": timing, "stand_in": stand_in or None}


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def release_perf(releases_root: str, release_id: str, name: str):
    """(perf record or None, why not) of one release and instance."""
    rdir = os.path.join(releases_root, release_id)
    status = (_read(os.path.join(rdir, "status.json")) or {}).get("status")
    if status == "failed":
        return None, f"{release_id} failed its smoke test"
    rec = (_read(os.path.join(rdir, "smoke", name + ".json")) or {}).get("smoke") or {}
    if not rec:
        return None, f"{release_id} has no smoke record of {name}"
    if not rec.get("passed"):
        return None, f"{release_id}'s smoke record of {name} did not pass"
    perf = rec.get("perf") or {}
    if perf.get("tokens_per_s_median") is None:
        return None, f"{release_id} measured no tok/s for {name}"
    return perf, ""


def find_baseline(releases_root: str, start_id: str | None, name: str, cond: dict, max_hops: int = MAX_HOPS):
    """({release, tokens_per_s_median, accept_length_median, ...} or None, notes): the newest release
    from ``start_id`` back along the manifests' ``previous`` links with a comparable measurement."""
    notes, seen, rid = [], set(), start_id
    while rid and rid not in seen and len(seen) < max_hops:
        seen.add(rid)
        perf, why = release_perf(releases_root, rid, name)
        if perf is not None:
            other = perf.get("conditions") or {}
            diff = sorted(k for k in cond if other.get(k) != cond[k])
            if not diff:
                return dict(perf, release=rid), notes
            why = f"{rid} measured {name} under other conditions ({', '.join(diff)} differ)"
        notes.append(why)
        rid = (_read(os.path.join(releases_root, rid, "manifest.json")) or {}).get("previous")
    return None, notes


def _fmt(v):
    return f"{v:g}" if isinstance(v, float) else str(v)


def judge(measured: dict, baseline: dict | None, gates: dict, speculative: bool, notes=()) -> list:
    """Gate results [{gate, ran, passed, figure, threshold, detail}] of one measurement."""
    out = []
    n = len(measured.get("samples") or [])
    tps, acc = measured.get("tokens_per_s_median"), measured.get("accept_length_median")
    rng = measured.get("tokens_per_s_range") or []
    runs = f"{n} runs" + (f" {_fmt(rng[0])}-{_fmt(rng[1])}" if len(rng) == 2 else "")
    mal = float(gates.get("min_accept_length") or 0)
    if speculative and mal > 0:
        ok = acc is not None and acc >= mal
        out.append({"gate": "spec.min_accept_length", "ran": True, "passed": ok, "figure": acc, "threshold": mal,
                    "detail": f"accept length median {_fmt(acc)} ({n} runs) "
                              f"{'>=' if ok else '<'} minimum {_fmt(mal)}"})
    elif speculative:
        out.append({"gate": "spec.min_accept_length", "ran": False, "reason": "min_accept_length is 0 (off)"})
    if not gates.get("perf", True):
        out.append({"gate": "perf", "ran": False, "reason": "perf is off (smoke_gates.perf: false)"})
        return out
    if baseline is None:
        why = "; ".join(notes) if notes else "no previous release to compare with"
        out.append({"gate": "perf", "ran": False, "reason": f"no comparable measurement: {why}"})
        return out
    ratio = float(gates.get("perf_ratio", 0.85))
    base_rel = baseline.get("release")
    btps = baseline.get("tokens_per_s_median")
    thr = round(ratio * btps, 2)
    ok = tps is not None and tps >= thr
    out.append({"gate": "perf.tokens_per_s", "ran": True, "passed": ok, "figure": tps, "threshold": thr,
                "baseline": btps, "baseline_release": base_rel, "ratio": ratio,
                "detail": f"tok/s median {_fmt(tps)} ({runs}) {'>=' if ok else '<'} threshold {_fmt(thr)} = "
                          f"{_fmt(ratio)} x {_fmt(btps)} tok/s measured by release {base_rel}"})
    bacc = baseline.get("accept_length_median")
    if speculative and acc is not None and bacc:
        athr = round(ratio * bacc, 3)
        aok = acc >= athr
        out.append({"gate": "perf.accept_length", "ran": True, "passed": aok, "figure": acc, "threshold": athr,
                    "baseline": bacc, "baseline_release": base_rel, "ratio": ratio,
                    "detail": f"accept length median {_fmt(acc)} ({n} runs) {'>=' if aok else '<'} threshold "
                              f"{_fmt(athr)} = {_fmt(ratio)} x {_fmt(bacc)} measured by release {base_rel}"})
    elif speculative:
        out.append({"gate": "perf.accept_length", "ran": False,
                    "reason": f"release {base_rel} recorded no accept length"})
    return out
