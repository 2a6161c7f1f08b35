"""tune.yml's statistics on recorded samples (tests/fixtures/bench/h200-2026-12-02: two runs of the H200
bench matrix, dummy weights): t intervals over rounds, order-statistic intervals of quantiles and when n is
too small for them, goodput under an objective, the stopping rule and the choice."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from ansible.module_utils.dflash_bench import ci
from ansible.module_utils.dflash_bench import goodput as gp
from scipy import stats

H200 = Path(__file__).resolve().parents[2] / "fixtures" / "bench" / "h200-2026-12-02"
CONFIGS = ("none", "dflash", "ddtree-b15-k8", "ddtree-b7-k1")
ALGO = {"none": "NONE", "dflash": "DFLASH", "ddtree-b15-k8": "DDTREE", "ddtree-b7-k1": "DDTREE"}
C4 = {"kind": "concurrency", "value": 4}
LOOSE = {"ttft_ms": 1000, "itl_ms": 50, "itl_quantile": 95}


def rounds_of(config):
    """The two runs of the recorded agent c4 cell as two rounds of a tune cell."""
    out = []
    for k in (1, 2):
        rec = json.loads((H200 / f"run-{k}__{config}__agent__c4.json").read_text())
        out.append({"round": k, "requests": rec["requests"], "wall_s": rec["summary"]["wall_s"], "load": C4,
                    "summary": rec["summary"]})
    return out


def tok_s(run):
    with open(H200 / f"run-{run}__results.csv", newline="") as fh:
        return {r["cell"]: float(r["output_tok_s"]) for r in csv.DictReader(fh)}


# ------------------------------------------------------------------ intervals


def test_t_interval_matches_scipy_on_the_recorded_cells():
    a, b = tok_s(1), tok_s(2)
    for cell in ("dflash__seeds__c4", "none__seeds__c4", "ddtree-b15-k1__seeds__c4"):
        vals = [a[cell], b[cell]]
        got = ci.mean_ci(vals)
        lo, hi = stats.t.interval(0.95, 1, loc=np.mean(vals), scale=stats.sem(vals))
        assert got["n"] == 2 and got["method"] == "t"
        assert got["low"] == pytest.approx(lo) and got["high"] == pytest.approx(hi)
        assert got["rel"] == pytest.approx((hi - lo) / 2 / np.mean(vals))
    # the cell that moved 1.78x between the runs: two rounds tell almost nothing (t with 1 df is 12.7)
    moved = ci.mean_ci([a["ddtree-b15-k1__seeds__c4"], b["ddtree-b15-k1__seeds__c4"]])
    assert moved["rel"] > 2


def test_one_value_has_no_interval():
    one = ci.mean_ci([144.42])
    assert one["mean"] == 144.42 and one["low"] is None and one["half"] is None and one["note"] == "n=1: no interval"
    assert ci.mean_ci([])["note"] == "no value"
    assert ci.mean_ci([5.0, 5.0, 5.0])["rel"] == 0.0
    assert ci.mean_ci([0.0, 0.0])["rel"] == 0.0  # no goodput in any round: narrow, not undefined


def test_quantile_interval_from_order_statistics_and_n_too_small():
    reqs = [r for rd in rounds_of("dflash") for r in rd["requests"]]
    ttft = [r["ttft"] * 1000 for r in reqs]
    assert len(ttft) == 24
    med = ci.quantile_ci(ttft, 50)
    srt = sorted(ttft)
    # the distribution-free 95% interval of a median of 24 is [x(7), x(18)] (1-based order statistics)
    assert (med["low"], med["high"]) == (srt[6], srt[17])
    assert med["value"] == pytest.approx(np.percentile(ttft, 50)) and med["note"] is None
    # 24 requests cannot bound a p95 or a p99: no upper bound, and the note says how many it takes
    for q, need in ((95, 72), (99, 368)):
        got = ci.quantile_ci(ttft, q)
        assert got["high"] is None and got["needs"] == need
        assert got["note"] == f"n too small (n=24; a 95% interval of p{q} needs n >= {need})"


@pytest.mark.parametrize("q", [50, 90, 95, 99])
def test_min_n_is_where_scipy_gives_both_bounds(q):
    need = ci.min_n_for_quantile(q)
    rng = np.random.default_rng(q)
    for n, both in ((need - 1, False), (need, True)):
        got = ci.quantile_ci(rng.exponential(size=n), q)
        assert (got["low"] is not None and got["high"] is not None) is both


def test_per_round_itl_quantile_needs_enough_tokens():
    rd = rounds_of("dflash")[0]
    itls = [x for r in rd["requests"] for x in r["itl"]]
    assert len(itls) > 368
    assert ci.per_round_quantile(itls, 99) == pytest.approx(np.percentile(itls, 99))
    assert ci.per_round_quantile(itls[:100], 99) is None and ci.per_round_quantile(itls[:100], 95) is not None


# ------------------------------------------------------------------ goodput


def test_goodput_closed_loop_on_the_recorded_cells():
    rd = rounds_of("dflash")[0]
    f = gp.round_figures(rd["requests"], rd["wall_s"], C4, LOOSE)
    assert f["completed"] == 12 and f["good"] == 12 and f["attainment"] == 1.0
    assert f["goodput_rps"] == pytest.approx(12 / rd["wall_s"])
    # output tok/s as bench.yml recorded it for the cell
    assert f["output_tok_s"] == pytest.approx(rd["summary"]["output_tok_s"], rel=1e-3)
    assert f["accept_length"] == pytest.approx(rd["summary"]["accept_length"], abs=1e-3)
    # a TTFT limit under this cell's median TTFT leaves about half the requests good
    strict = {"ttft_ms": rd["summary"]["ttft_p50_ms"], "itl_ms": None}
    g = gp.round_figures(rd["requests"], rd["wall_s"], C4, strict)
    ttfts = sorted(r["ttft"] * 1000 for r in rd["requests"])
    assert g["good"] == sum(1 for t in ttfts if t <= rd["summary"]["ttft_p50_ms"]) and 0 < g["good"] < 12


def test_request_itl_limit_uses_each_requests_own_quantile():
    rd = rounds_of("ddtree-b15-k8")[0]
    per_req = sorted(np.percentile(r["itl"], 95) * 1000 for r in rd["requests"])
    limit = per_req[5] + 1e-9  # 6 of 12 requests have their p95 ITL at or under it
    f = gp.round_figures(rd["requests"], rd["wall_s"], C4, {"ttft_ms": None, "itl_ms": limit, "itl_quantile": 95})
    assert f["good"] == 6


def test_open_loop_goodput_is_rate_times_attainment():
    reqs = [{"ok": True, "ttft": 0.1, "itl": [0.01] * 10, "latency": 0.2, "completion_tokens": 11},
            {"ok": True, "ttft": 2.0, "itl": [0.01] * 10, "latency": 2.1, "completion_tokens": 11},
            {"ok": False, "error": "HTTP 500"}, {"ok": True, "ttft": 0.1, "itl": [0.2] * 10, "latency": 2.1,
                                                 "completion_tokens": 11}]
    f = gp.round_figures(reqs, 3.0, {"kind": "rate", "value": 8}, LOOSE)
    assert f["good"] == 1 and f["sent"] == 4 and f["attainment"] == 0.25 and f["goodput_rps"] == 2.0
    assert f["goodput_tok_s"] == pytest.approx(11 / 3.0)


def test_objective_errors_name_the_field():
    assert gp.check_objective({"ttft_ms": 500, "itl_ms": 40}) == []
    errs = gp.check_objective({"ttft_ms": -1, "itl_quantile": 101, "tpot": 3}, "ct200")
    assert "ct200: dflash_bench_tune_objective: field 'tpot': unknown" in errs[0]
    assert any("field 'ttft_ms': -1 must be a positive number" in e for e in errs)
    assert any("field 'itl_quantile': 101 must be a percentile" in e for e in errs)
    assert gp.check_objective({"ttft_ms": None, "itl_ms": None}, "h")[-1].endswith("every completed request would count")


def test_cell_stats_on_the_recorded_cells():
    s = gp.cell_stats(rounds_of("dflash"), LOOSE)
    assert s["n_rounds"] == 2 and s["requests"] == 24
    assert s["output_tok_s"]["n"] == 2
    assert s["output_tok_s"]["mean"] == pytest.approx((456.72 + 476.49) / 2, rel=1e-3)
    assert s["ttft_p50_ms"]["n"] == 24 and s["ttft_p50_ms"]["low"] is not None
    assert s["ttft_p99_ms"]["note"].startswith("n too small")
    # every request accepted ~1 token a step (dummy weights): the per-request accept lengths say so
    assert s["accept_per_request"]["n"] == 24 and s["accept_per_request"]["mean"] == pytest.approx(1.016, abs=0.01)
    assert s["accept_histogram"] == []  # DFLASH in sglang 0.5.11 keeps no per-step histogram
    none = gp.cell_stats(rounds_of("none"), LOOSE)
    assert none["accept_per_request"]["n"] == 0 and none["accept_lengths"] == []


# ------------------------------------------------------------------ stopping rule and choice


def entries(obj=LOOSE):
    out = []
    for c in CONFIGS:
        st = gp.cell_stats(rounds_of(c), obj)
        d = gp.deciding([{"load": C4, "stats": st}])
        out.append({"name": c, "algorithm": ALGO[c], **d})
    return out


def test_the_recorded_matrix_says_speculation_does_not_pay():
    # dummy weights: the draft is never right, every speculative server runs at a third of no speculation
    choice = gp.choose(entries())
    assert choice["verdict"] == "speculation_does_not_pay" and choice["best"]["name"] == "none"
    assert choice["text"].startswith("speculation does not pay here")
    assert choice["ranking"][0] == "none" and choice["tied"] == []
    assert choice["ratio"]["n"] == 2 and choice["ratio"]["mean"] > 2.5
    # among the speculative configurations two runs cannot tell DFLASH from DDTREE b7/k1
    spec = choice["speculative"]
    assert spec["verdict"] == "no_winner" and {spec["best"]["name"], spec["runner_up"]["name"]} <= {
        "dflash", "ddtree-b7-k1", "ddtree-b15-k8"}


def test_the_deciding_load_is_the_one_sustained_with_confidence():
    def cell(rate, vals):
        return {"load": {"kind": "rate", "value": rate},
                "stats": {"goodput_rps": ci.mean_ci(vals), "by_round": dict(enumerate(vals, 1))}}

    # past saturation: a higher mean, but an interval that reaches far lower than the steady rate's
    got = gp.deciding([cell(16, [16.0, 16.0, 16.0]), cell(32, [30.0, 24.0, 31.0]), cell(40, [35.0, 10.0, 40.0])])
    assert got["load"]["value"] == 32
    assert gp.deciding([cell(16, [16.0]), cell(32, [20.0])])["load"]["value"] == 32  # no interval yet: the mean
    closed = {"load": {"kind": "concurrency", "value": 4}, "stats": {"goodput_rps": ci.mean_ci([99.0, 99.0])}}
    assert gp.deciding([closed, cell(16, [16.0, 16.0])])["load"]["kind"] == "rate"  # open loop first


def test_no_winner_when_intervals_overlap_and_a_clear_winner_otherwise():
    def e(name, algo, vals):
        return {"name": name, "algorithm": algo, "load": C4, "ci": ci.mean_ci(vals),
                "by_round": dict(enumerate(vals, 1))}

    tie = gp.choose([e("ddtree-b15-k8", "DDTREE", [10.0, 10.4, 9.8]), e("ddtree-b7-k4", "DDTREE", [10.1, 9.9, 10.2]),
                     e("none", "NONE", [5.0, 5.1, 4.9])])
    assert tie["verdict"] == "no_winner" and tie["best"]["name"] == "ddtree-b15-k8"
    assert tie["runner_up"]["name"] == "ddtree-b7-k4" and tie["tied"] == ["ddtree-b7-k4"]
    win = gp.choose([e("ddtree-b15-k8", "DDTREE", [20.0, 20.4, 19.8]), e("dflash", "DFLASH", [10.1, 9.9, 10.2]),
                     e("none", "NONE", [5.0, 5.1, 4.9])])
    assert win["verdict"] == "winner" and win["best"]["name"] == "ddtree-b15-k8"
    assert win["runner_up"]["name"] == "dflash" and win["ratio"]["mean"] == pytest.approx(2.0, rel=0.02)
    assert win["speculative"]["verdict"] == "winner"
    near = gp.choose([e("none", "NONE", [10.0, 10.4, 9.8]), e("dflash", "DFLASH", [10.1, 9.9, 10.2])])
    assert near["verdict"] == "no_winner" and "speculation is not shown to pay" in near["text"]
    one = gp.choose([e("none", "NONE", [10.0]), e("dflash", "DFLASH", [5.0])])
    assert one["verdict"] == "too_few_rounds"


def test_stopping_rule():
    two = {e["name"]: e["ci"] for e in entries()}  # the recorded runs: 2 rounds, t with 1 df
    v = ci.stop_verdict(two, 2, min_rounds=3, max_rounds=10, target_rel=0.05)
    assert v["stop"] is False and v["widest"] in CONFIGS and v["widest_rel"] > 0.05
    assert ci.stop_verdict(two, 10, max_rounds=10)["reason"] == "max_rounds"
    assert ci.stop_verdict(two, 2, time_left_s=20, last_round_s=30)["reason"] == "budget"
    assert ci.stop_verdict(two, 2, time_left_s=40, last_round_s=30)["stop"] is False
    narrow = {"a": ci.mean_ci([100, 101, 99]), "b": ci.mean_ci([50, 50.5, 49.5])}
    assert ci.stop_verdict(narrow, 3, target_rel=0.05) == {"stop": True, "reason": "ci", "widest": "a",
                                                           "widest_rel": pytest.approx(0.0248, abs=1e-3),
                                                           "rounds": 3, "contenders": ["a"]}
    # never before min_rounds: counted behind each contender's figure (3 here), not the run's rounds
    assert ci.stop_verdict(narrow, 3, min_rounds=4)["stop"] is False
    assert ci.stop_verdict(narrow, 4, min_rounds=3)["stop"] is True
    assert ci.stop_verdict(narrow, 3, target_rel=0.01)["stop"] is False
    # a configuration clear below the best decides nothing: its wide interval does not hold the run back
    out = dict(narrow, c=ci.mean_ci([10.0, 30.0, 20.0]))
    assert ci.contenders(out) == ["a"] and ci.stop_verdict(out, 3)["reason"] == "ci"
    # one whose interval overlaps the best's is a contender, and its width counts
    close = dict(narrow, d=ci.mean_ci([90.0, 110.0, 100.0]))
    assert ci.contenders(close) == ["a", "d"] and ci.stop_verdict(close, 3)["stop"] is False
    # one round has no interval: never narrow enough
    assert ci.stop_verdict({"a": ci.mean_ci([1.0])}, 1, min_rounds=1)["stop"] is False
