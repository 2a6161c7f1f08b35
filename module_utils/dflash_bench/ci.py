"""Confidence intervals and the stopping rule of tune.yml (controller side: numpy and scipy).

Three kinds of figure, three methods, each stated beside the figure with its n:

* a rate of a repeated measurement (tok/s, requests/s, goodput of one cell in one round): the rounds are
  independent runs of the same cell, so the interval is Student's t over the per-round values
  (``mean_ci``; n = rounds). Percentile bootstraps over 3-5 values are far too narrow (they cannot see
  past the sample's own range), and the H200 record showed the run-to-run spread is what matters: up to
  1.78x between two runs of one cell while each run's requests agreed closely.
* a quantile of per-request values (TTFT, end-to-end latency, a request's own p95 ITL) pooled over the
  cell's rounds: the distribution-free interval from order statistics (the binomial count of values
  below the quantile; scipy.stats.quantile_test), ``quantile_ci``. It exists only when n is large enough
  for the confidence asked (95 %: n >= 6 for a median, 72 for p95, 368 for p99); otherwise the bound is
  missing and the figure says "n too small" instead of showing the largest value as a p99.
* a quantile of per-token values (inter-token latency): tokens of one request are not independent, so an
  order-statistic interval over tokens would be far too narrow. The quantile is taken per round (only
  when that round has enough tokens for it, as above) and the interval is t over the rounds, like a rate.

The stopping rule (``stop_verdict``): measure another round until the interval of the deciding figure
of every contender (the best configuration and each one whose interval still overlaps the best's) is
narrower than a relative target (half-width / mean), with at least ``min_rounds`` rounds, at most
``max_rounds``, and never past the time budget (a round is not started when the time left is shorter
than the last round took). A configuration whose whole interval lies below the best's is out of the
race: more rounds would only narrow an interval that decides nothing. No Ansible import.
"""

from __future__ import annotations

import math

CONFIDENCE = 0.95


def _finite(values):
    out = []
    for v in (() if values is None else values):
        if v is None or isinstance(v, bool):
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out.append(f)
    return out


def t_quantile(confidence, df) -> float:
    """The two-sided Student t quantile for ``confidence`` with ``df`` degrees of freedom."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + float(confidence) / 2.0, int(df)))


def mean_ci(values, confidence=CONFIDENCE) -> dict:
    """Student's t interval of the mean of independent values (rounds of one cell).

    -> {n, mean, low, high, half, rel, sd, method, note}; with n < 2 there is no interval (low/high/half
    None, note says so). ``rel`` = half / |mean| (0 when mean and half are both 0; None without an
    interval)."""
    vals = _finite(values)
    n = len(vals)
    out = {"n": n, "mean": None, "low": None, "high": None, "half": None, "rel": None, "sd": None,
           "method": "t", "note": None}
    if n == 0:
        out["note"] = "no value"
        return out
    mean = math.fsum(vals) / n
    out["mean"] = mean
    if n < 2:
        out["note"] = "n=1: no interval"
        return out
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
    half = t_quantile(confidence, n - 1) * sd / math.sqrt(n)
    out.update(sd=sd, half=half, low=mean - half, high=mean + half)
    out["rel"] = (half / abs(mean)) if mean else (0.0 if half == 0 else None)
    return out


def min_n_for_quantile(q, confidence=CONFIDENCE) -> int:
    """The smallest sample whose order statistics give a two-sided ``confidence`` interval for the
    ``q``-th percentile (both bounds): (max(p, 1-p))^n <= (1 - confidence) / 2."""
    p = float(q) / 100.0
    tail = (1.0 - float(confidence)) / 2.0
    worst = max(p, 1.0 - p)
    if worst >= 1.0:
        return 10**9
    return math.ceil(math.log(tail) / math.log(worst) - 1e-9)


def percentile(values, q):
    """numpy's default (linear) percentile, None for no values."""
    vals = _finite(values)
    if not vals:
        return None
    import numpy as np

    return float(np.percentile(vals, float(q)))


def quantile_ci(values, q, confidence=CONFIDENCE) -> dict:
    """The ``q``-th percentile of independent values and its distribution-free interval from order
    statistics (scipy.stats.quantile_test). -> {n, value, low, high, method, note, needs}; a bound that the
    sample cannot give at this confidence is None and the note says "n too small" with the n needed."""
    vals = _finite(values)
    n = len(vals)
    needs = min_n_for_quantile(q, confidence)
    out = {"n": n, "value": percentile(vals, q), "low": None, "high": None, "method": "order statistics",
           "note": None, "needs": needs}
    if n == 0:
        out["note"] = "no value"
        return out
    if len(set(vals)) == 1:  # every value equal: the quantile is that value, the interval a point
        out.update(low=vals[0], high=vals[0])
        return out
    from scipy import stats

    ci = stats.quantile_test(vals, q=out["value"], p=float(q) / 100.0).confidence_interval(float(confidence))
    low, high = float(ci.low), float(ci.high)
    out["low"] = low if math.isfinite(low) else None
    out["high"] = high if math.isfinite(high) else None
    if out["low"] is None or out["high"] is None:
        out["note"] = f"n too small (n={n}; a {round(100 * confidence)}% interval of p{q:g} needs n >= {needs})"
    return out


def per_round_quantile(values, q, confidence=CONFIDENCE):
    """One round's ``q``-th percentile, or None when the round has fewer values than a two-sided
    interval of that percentile needs (the figure would be the sample's extreme, not a p99)."""
    vals = _finite(values)
    if len(vals) < min_n_for_quantile(q, confidence):
        return None
    return percentile(vals, q)


def overlap(a: dict, b: dict) -> bool | None:
    """Whether two intervals ({low, high}) overlap; None when either has none."""
    if None in (a.get("low"), a.get("high"), b.get("low"), b.get("high")):
        return None
    return a["low"] <= b["high"] and b["low"] <= a["high"]


def paired_ratio_ci(a_by_round: dict, b_by_round: dict, confidence=CONFIDENCE) -> dict:
    """a / b round by round (the rounds both measured, b > 0): t interval of the mean ratio. The rounds
    interleave the configurations, so a ratio within a round cancels what drifted between rounds."""
    ratios = [float(a_by_round[r]) / float(b_by_round[r]) for r in sorted(set(a_by_round) & set(b_by_round))
              if a_by_round[r] is not None and b_by_round[r] not in (None, 0)]
    return mean_ci(ratios, confidence)


def contenders(deciding: dict) -> list:
    """The configurations still in the race: the best mean, and every one whose interval overlaps the best's
    (or has none yet). One whose whole interval lies below the best's is decided out."""
    scored = {k: v for k, v in deciding.items() if v.get("mean") is not None}
    if not scored:
        return sorted(deciding)
    best = max(scored, key=lambda k: (scored[k]["mean"], k))
    return sorted(k for k, v in deciding.items() if k == best or v.get("mean") is None
                  or overlap(v, scored[best]) is not False)


def stop_verdict(deciding: dict, rounds_done: int, min_rounds=3, max_rounds=10, target_rel=0.05,
                 time_left_s=None, last_round_s=None) -> dict:
    """Whether to measure another round. ``deciding``: {configuration: mean_ci of its deciding figure}.

    The rule looks at the contenders (``contenders``): measuring on only narrows the intervals of
    configurations already clear of the best. -> {stop, reason, widest (configuration), widest_rel,
    rounds, contenders}. Reasons: "ci" (every contender's half-width is at most ``target_rel`` of its
    mean), "max_rounds", "budget" (the time left is shorter than the last round took), "" while going on."""
    race = contenders(deciding)
    widest, widest_rel = None, -1.0
    for name in race:
        rel = deciding[name].get("rel")
        rel = math.inf if rel is None else rel
        if rel > widest_rel:
            widest, widest_rel = name, rel
    out = {"stop": False, "reason": "", "widest": widest,
           "widest_rel": None if widest_rel in (-1.0, math.inf) else round(widest_rel, 4), "rounds": rounds_done,
           "contenders": race}
    narrow = bool(deciding) and widest_rel <= float(target_rel)
    # min_rounds counts the rounds behind each contender's figure (an open-loop cell whose rates came from a
    # first, closed-loop round has one fewer than the run)
    enough = bool(race) and min(int(deciding[n].get("n") or 0) for n in race) >= int(min_rounds)
    if rounds_done >= int(max_rounds):
        out.update(stop=True, reason="max_rounds")
    elif enough and narrow:
        out.update(stop=True, reason="ci")
    elif time_left_s is not None and (float(time_left_s) <= 0 or (
            last_round_s is not None and float(time_left_s) < float(last_round_s))):
        out.update(stop=True, reason="budget")
    return out


STOP_REASONS = {
    "ci": "the deciding figure's interval of every contender is narrower than the target",
    "max_rounds": "the most rounds allowed were measured",
    "budget": "the time budget ended (the next round would not fit)",
    "no_server": "no server of the wave came up",
    "": "not stopped",
}
