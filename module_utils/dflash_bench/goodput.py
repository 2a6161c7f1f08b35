"""Goodput under the user's objective, the figures of a tune cell with their intervals, and the choice.

The objective (``dflash_bench_tune_objective``): a request is *good* when it completed, its time to first
token is at most ``ttft_ms``, the ``itl_quantile``-th percentile of its own inter-token latencies is at
most ``itl_ms`` and (when set) its end-to-end latency is at most ``e2e_ms``.

Goodput of one cell in one round:
* open loop at rate r (Poisson arrivals, the same schedule for every configuration of a round):
  r x the fraction of good requests (the requests/s of the offered traffic the server serves within the
  objective). Dividing by the wall time instead would put the arrival sample's own noise (about
  1/sqrt(n)) into every figure;
* closed loop: good requests / wall time of the cell.
Token goodput (good requests' tokens / wall time) is shown beside it.

The deciding figure of a configuration: the goodput it sustains with confidence over the open-loop rates
(the rate whose goodput interval has the highest lower bound), or over the closed-loop levels when no
rate was measured; with the t interval over the rounds of that cell (module ci). The choice: the configuration with the best
deciding figure; "no winner" when its interval overlaps the runner-up's; "speculation does not pay
here" when the winner runs without speculation. Pure functions; no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_bench import ci

OBJECTIVE_KEYS = {"ttft_ms", "itl_ms", "itl_quantile", "e2e_ms"}
DEFAULT_OBJECTIVE = {"ttft_ms": 1000, "itl_ms": 50, "itl_quantile": 95, "e2e_ms": None}
# the per-request latency quantiles of the tables (order-statistic intervals over the cell's requests)
REQUEST_QUANTILES = (50, 95, 99)
# the per-token ITL quantiles (per round, t interval over rounds)
TOKEN_QUANTILES = (50, 95, 99)


class ObjectiveError(ValueError):
    pass


def check_objective(obj, host="host") -> list:
    """Errors of ``dflash_bench_tune_objective`` (empty when fine)."""
    where = f"{host}: dflash_bench_tune_objective"
    if not isinstance(obj, dict):
        return [f"{where}: must be a mapping with ttft_ms, itl_ms, itl_quantile, e2e_ms, got {obj!r}"]
    errors = [f"{where}: field '{k}': unknown (known: {', '.join(sorted(OBJECTIVE_KEYS))})"
              for k in sorted(set(obj) - OBJECTIVE_KEYS)]
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        v = obj.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            errors.append(f"{where}: field '{key}': {v!r} must be a positive number of milliseconds (or null)")
    q = obj.get("itl_quantile", 95)
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 100:
        errors.append(f"{where}: field 'itl_quantile': {q!r} must be a percentile in (0, 100]")
    if all(obj.get(k) is None for k in ("ttft_ms", "itl_ms", "e2e_ms")):
        errors.append(f"{where}: no limit set (ttft_ms, itl_ms or e2e_ms): every completed request would count")
    return errors


def objective(obj) -> dict:
    out = dict(DEFAULT_OBJECTIVE)
    out.update({k: v for k, v in (obj or {}).items() if k in OBJECTIVE_KEYS})
    return out


def describe_objective(obj) -> str:
    o = objective(obj)
    parts = []
    if o.get("ttft_ms") is not None:
        parts.append(f"TTFT <= {o['ttft_ms']:g} ms")
    if o.get("itl_ms") is not None:
        parts.append(f"the request's p{o['itl_quantile']:g} ITL <= {o['itl_ms']:g} ms")
    if o.get("e2e_ms") is not None:
        parts.append(f"end-to-end <= {o['e2e_ms']:g} ms")
    return " and ".join(parts)


def request_itl_quantile(req, q):
    """The ``q``-th percentile of one request's inter-token latencies (s), None without any."""
    return ci.percentile(req.get("itl") or [], q)


def is_good(req, obj) -> bool:
    o = objective(obj)
    if not req.get("ok"):
        return False
    if o.get("ttft_ms") is not None and (req.get("ttft") is None or req["ttft"] * 1000.0 > o["ttft_ms"]):
        return False
    if o.get("itl_ms") is not None:
        itl = request_itl_quantile(req, o.get("itl_quantile", 95))
        if itl is not None and itl * 1000.0 > o["itl_ms"]:
            return False
    return o.get("e2e_ms") is None or (req.get("latency") is not None and req["latency"] * 1000.0 <= o["e2e_ms"])


def accept_length(req):
    """completion tokens / verify steps of one request (the server's meta_info), None without them."""
    steps = req.get("spec_verify_ct")
    if not steps or not req.get("ok"):
        return None
    return int(req.get("completion_tokens") or 0) / float(steps)


def round_figures(requests, wall_s, load, obj) -> dict:
    """The figures of one cell in one round. ``load``: {kind: rate|concurrency, value}."""
    ok = [r for r in requests if r.get("ok")]
    good = [r for r in ok if is_good(r, obj)]
    sent = [r for r in requests if not r.get("skipped")]
    wall = float(wall_s or 0)
    tokens = sum(int(r.get("completion_tokens") or 0) for r in ok)
    good_tokens = sum(int(r.get("completion_tokens") or 0) for r in good)
    verify = sum(int(r.get("spec_verify_ct") or 0) for r in ok if r.get("spec_verify_ct"))
    verify_tokens = sum(int(r.get("completion_tokens") or 0) for r in ok if r.get("spec_verify_ct"))
    attainment = len(good) / len(sent) if sent else None
    if load.get("kind") == "rate":
        goodput = float(load["value"]) * attainment if attainment is not None else None
    else:
        goodput = len(good) / wall if wall > 0 else None
    itls = [x for r in ok for x in (r.get("itl") or [])]
    out = {
        "requests": len(requests), "sent": len(sent), "completed": len(ok), "good": len(good),
        "failed": len([r for r in requests if not r.get("ok") and not r.get("skipped")]),
        "attainment": attainment, "goodput_rps": goodput,
        "goodput_tok_s": good_tokens / wall if wall > 0 else None,
        "output_tok_s": tokens / wall if wall > 0 and tokens else None,
        "request_s": len(ok) / wall if wall > 0 and ok else None,
        "wall_s": wall, "tokens": tokens, "itl_samples": len(itls),
        "accept_length": verify_tokens / verify if verify else None,
    }
    for q in TOKEN_QUANTILES:
        v = ci.per_round_quantile(itls, q)
        out[f"itl_p{q}_ms"] = None if v is None else v * 1000.0
    return out


def _ms(values):
    return [v * 1000.0 for v in values if v is not None]


ROUND_FIELDS = ("goodput_rps", "goodput_tok_s", "attainment", "output_tok_s", "request_s", "accept_length",
                *(f"itl_p{q}_ms" for q in TOKEN_QUANTILES))


def cell_stats(rounds, obj, confidence=ci.CONFIDENCE) -> dict:
    """A cell measured over rounds. ``rounds``: [{round, requests, wall_s, load}] of one configuration at
    one load point. -> {n_rounds, <round field>: mean_ci over rounds, ttft/e2e/req_itl quantiles:
    quantile_ci over the pooled requests, accept: per-request accept lengths (mean_ci) and the per-step
    histogram where the server gave one, by_round: {round: goodput_rps}}."""
    figures = [(r["round"], round_figures(r["requests"], r["wall_s"], r["load"], obj)) for r in rounds]
    growth = sorted(g for g in (queue_growth(r["requests"]) for r in rounds) if g is not None)
    out = {"n_rounds": len(figures), "by_round": {k: f["goodput_rps"] for k, f in figures},
           "requests": sum(f["requests"] for _, f in figures), "completed": sum(f["completed"] for _, f in figures),
           "good": sum(f["good"] for _, f in figures), "itl_samples": sum(f["itl_samples"] for _, f in figures),
           "queue_growth": growth[len(growth) // 2] if growth else None}
    for field in ROUND_FIELDS:
        out[field] = ci.mean_ci([f[field] for _, f in figures], confidence)
    reqs = [q for r in rounds for q in r["requests"] if q.get("ok")]
    o = objective(obj)
    for q in REQUEST_QUANTILES:
        out[f"ttft_p{q}_ms"] = ci.quantile_ci(_ms(r.get("ttft") for r in reqs), q, confidence)
        out[f"e2e_p{q}_ms"] = ci.quantile_ci(_ms(r.get("latency") for r in reqs), q, confidence)
    out["req_itl_ms"] = ci.quantile_ci(_ms(request_itl_quantile(r, o["itl_quantile"]) for r in reqs), 50, confidence)
    acc = [a for a in (accept_length(r) for r in reqs) if a is not None]
    out["accept_per_request"] = ci.mean_ci(acc, confidence)
    out["accept_lengths"] = [round(a, 4) for a in acc]
    hist = []
    for r in reqs:
        h = r.get("spec_accept_histogram")
        if isinstance(h, list) and h:
            hist = [a + b for a, b in zip(hist + [0] * (len(h) - len(hist)), h + [0] * (len(hist) - len(h)))]
    out["accept_histogram"] = hist  # steps that accepted 0, 1, 2, ... drafts (+1 token each: the bonus)
    cached = sum(int(r.get("cached_tokens") or 0) for r in reqs)
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in reqs)
    out["cached_ratio"] = cached / prompt if prompt else None
    return out


def queue_growth(requests):
    """Mean TTFT of the last quarter of a round's requests (in sending order) over the first quarter's (at least
    20 ms, so that jitter of a few milliseconds is no growth): a server that keeps up stays near 1, a queue that
    grows through the cell goes well past it."""
    sent = sorted((r for r in requests if r.get("ok") and r.get("ttft") is not None and "sent_at" in r),
                  key=lambda r: r["sent_at"])
    q = len(sent) // 4
    if q < 2:
        return None
    first = sum(r["ttft"] for r in sent[:q]) / q
    last = sum(r["ttft"] for r in sent[-q:]) / q
    return last / max(first, 0.02)


def saturated(stats, load) -> bool | None:
    """An open-loop cell the server did not keep up with: under 90 % of its requests met the objective, or
    its queue grew through the cell (the last quarter's TTFT more than twice the first quarter's, median over
    the rounds)."""
    if load.get("kind") != "rate":
        return None
    att = (stats.get("attainment") or {}).get("mean")
    growth = stats.get("queue_growth")
    return (att is None or att < 0.9) or (growth is not None and growth > 2.0)


def deciding(cells_of_config: list) -> dict | None:
    """The deciding figure of one configuration from its cells ([{load, stats}]): the goodput it sustains with
    confidence, that is the open-loop cell (closed-loop cells when no rate was measured) whose interval has
    the highest lower bound (its mean where there is no interval yet; ties: the higher load). A noisy cell past
    saturation with a high mean and a wide interval does not win over a steady one. -> {load, ci, by_round}."""
    opened = [c for c in cells_of_config if c["load"]["kind"] == "rate"]
    pool = opened or cells_of_config
    best = None
    for c in pool:
        g = c["stats"]["goodput_rps"]
        if g.get("mean") is None:
            continue
        key = (round(g["low"] if g.get("low") is not None else g["mean"], 9), round(g["mean"], 9),
               float(c["load"]["value"]))
        if best is None or key > best[0]:
            best = (key, c)
    if best is None:
        return None
    c = best[1]
    return {"load": c["load"], "ci": c["stats"]["goodput_rps"], "by_round": c["stats"]["by_round"]}


VERDICTS = {
    "winner": "the best goodput, its interval clear of the runner-up's",
    "no_winner": "no winner: the best goodput's interval overlaps the runner-up's",
    "speculation_does_not_pay": "speculation does not pay here: no speculation has the best goodput, "
                                "clear of every speculative configuration",
    "too_few_rounds": "no winner: fewer than 2 rounds, no interval",
    "single": "only one configuration was measured",
    "none": "nothing was measured",
}


def _rank(entries):
    return sorted((e for e in entries if e["ci"].get("mean") is not None),
                  key=lambda e: (-e["ci"]["mean"], e["name"]))


def _compare(ranked):
    """best vs runner-up of a ranked list -> (verdict among winner/no_winner/too_few_rounds/single/none,
    best, runner, ratio)."""
    if not ranked:
        return "none", None, None, None
    best = ranked[0]
    if len(ranked) == 1:
        return "single", best, None, None
    runner = ranked[1]
    ratio = ci.paired_ratio_ci(best.get("by_round") or {}, runner.get("by_round") or {})
    ov = ci.overlap(best["ci"], runner["ci"])
    if ov is None:
        return "too_few_rounds", best, runner, ratio
    return ("no_winner" if ov else "winner"), best, runner, ratio


def choose(entries) -> dict:
    """``entries``: [{name, algorithm, load, ci, by_round, ...}] (one per configuration, its deciding
    figure). -> {verdict, text, best, runner_up, ratio, tied (names whose interval overlaps the best's),
    speculative: {verdict, best, runner_up, ratio} among the speculative configurations only}."""
    ranked = _rank(entries)
    verdict, best, runner, ratio = _compare(ranked)
    if verdict == "winner" and best["algorithm"] == "NONE":
        verdict = "speculation_does_not_pay"
    tied = [e["name"] for e in ranked[1:] if best and ci.overlap(best["ci"], e["ci"])]
    spec = [e for e in ranked if e["algorithm"] != "NONE"]
    s_verdict, s_best, s_runner, s_ratio = _compare(spec)
    text = VERDICTS[verdict]
    if verdict == "no_winner" and best and (best["algorithm"] == "NONE" or runner["algorithm"] == "NONE"):
        text += " (no speculation among them: speculation is not shown to pay)"
    return {"verdict": verdict, "text": text, "best": best, "runner_up": runner, "ratio": ratio, "tied": tied,
            "ranking": [e["name"] for e in ranked],
            "speculative": {"verdict": s_verdict, "best": s_best, "runner_up": s_runner, "ratio": s_ratio}}
