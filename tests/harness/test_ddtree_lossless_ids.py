"""gpu-harness/ddtree_lossless.py keeps every server's ids and compares DDTREE with DFLASH (standard library)."""

from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import ddtree_lossless as L


def rec(kind, prompt, n, ids, gap=0.0):
    return {"kind": kind, "prompt": prompt, "n": n, "output_ids": ids, "max_gap": gap, "scored_tokens": len(ids),
            "worst": None, "accept_length": 2.0}  # fmt: skip


def test_judge_keeps_ids_per_case_unless_asked_not_to():
    recs = [rec("bs1", 0, 3, [5, 6, 7]), rec("bs4", 1, 3, [1, 2, 3])]
    res = L.judge(recs, {"bs1:0:3": [5, 6, 7], "bs4:1:3": [1, 2, 4]})
    assert res["ids"] == {"bs1:0:3": [5, 6, 7], "bs4:1:3": [1, 2, 3]}
    assert res["ids_mismatch"] == [{"case": "bs4:1:3", "first_diff": 2}]
    assert all("output_ids" not in c for c in res["per_case"])
    assert "ids" not in L.judge(recs, {}, keep_ids=False)


def test_versus_dflash_case_by_case():
    servers = {
        "hybrid-dflash": {"ids": {"a": [1, 2, 3], "b": [4, 5, 6], "c": [7, 8]}},
        "hybrid-t15": {"ids": {"a": [1, 2, 3], "b": [4, 9, 6], "c": [7, 8, 9]}},
        "hybrid-sl15": {"ids": {"a": [1, 2, 3], "z": [0]}},
        "hybrid-t15ng": {"error": "ConnectionError: down"},
    }
    vs = L.versus_dflash(servers, "hybrid")
    assert vs["hybrid-t15"] == {"cases": 3, "equal": 1, "only_here": [],
                                "differ": [{"case": "b", "first_diff": 1}, {"case": "c", "first_diff": 2}]}  # fmt: skip
    assert vs["hybrid-sl15"] == {"cases": 1, "equal": 1, "differ": [], "only_here": ["z"]}
    assert set(vs) == {"hybrid-t15", "hybrid-sl15"}  # the crashed server has no ids to compare
    assert L.versus_dflash({"hybrid-t15": servers["hybrid-t15"]}, "hybrid") == {}  # no DFLASH: nothing to say


def test_summary_json_one_line_per_id_list_and_markdown(tmp_path):
    ph = {"ranks": [0, 1], "servers": {
        "dense-t15": L.judge([rec("bs1", 0, 3, [5, 6, 7])], {"bs1:0:3": [5, 6, 7]}),
        "dense-dflash": L.judge([rec("bs1", 0, 3, [5, 6, 8])], {"bs1:0:3": [5, 6, 7]})}}  # fmt: skip
    ph["ddtree_vs_dflash"] = L.versus_dflash(ph["servers"], "dense")
    summary = {"started": "t", "eps": L.EPS, "elapsed_s": 1, "servers": {},
               "models": {"dense": {"controls": {}, "phases": {"plain": ph}, "reference_ids": {"bs1:0:3": [5, 6, 7]}}}}  # fmt: skip
    path = tmp_path / "summary.json"
    L.write_compact_json(str(path), summary)
    text = path.read_text()
    assert json.loads(text) == summary
    assert '"bs1:0:3": [5, 6, 7]' in text and '"ranks": [0, 1]' in text
    md = tmp_path / "summary.md"
    L.write_markdown(summary, str(md))
    assert "| dense-t15 | 1 | 0 of 1 | bs1:0:3 at 2 |" in md.read_text()


def test_float32_mode_runs_every_server_in_float32_through_the_shim(tmp_path):
    bf = L.servers_for("hybrid", 36000, str(tmp_path), str(tmp_path), "/m")
    f32 = L.servers_for("hybrid", 36000, str(tmp_path), str(tmp_path), "/m", fp32=True)
    names = [s.name for s in bf]
    assert names[-1] == "hybrid-ref32" and [s.name for s in f32] == names[:-1]  # the reference is float32 itself
    for s in f32:
        assert s.cmd[s.cmd.index("--dtype") + 1] == "float32", s.name
        assert "fp32_shim" in s.env["PYTHONPATH"] and s.env["SGLANG_MAMBA_CONV_DTYPE"] == "float32", s.name
    for s in bf[:-1]:
        assert s.cmd[s.cmd.index("--dtype") + 1] == "bfloat16" and "PYTHONPATH" not in s.env, s.name
    # the speculative servers keep their own switches (oracle, broken-commit flag) in float32 too
    t15 = next(s for s in f32 if s.name == "hybrid-t15")
    assert "SGLANG_DDTREE_ORACLE" in t15.env and "SGLANG_DDTREE_TEST_BREAK" in t15.env
    assert L.EPS_FP32 < L.EPS_BF16


def test_verdict_fails_when_a_server_never_served():
    ok = L.judge([rec("bs1", 0, 3, [5, 6, 7])], {"bs1:0:3": [5, 6, 7]})
    mm = {"controls": {"context_changes_output": True, "repeat_identical": True},
          "phases": {"plain": {"ranks": [], "servers": {"hybrid-t15": ok}}},
          "broken_commit": {"state": {"control_fails_as_it_must": True}}}  # fmt: skip
    up = {"healthy_after_s": 50.0, "error": None}
    summary = {"models": {"hybrid": mm}, "servers": {"hybrid-ref": up, "hybrid-t15": up, "dense-t15ng": {
        "healthy_after_s": None, "error": "exited rc=-9"}}}  # fmt: skip
    assert L.verdict(summary, "hybrid") == "PASS"  # another model's server is not this model's
    summary["servers"]["hybrid-t15ng"] = {"healthy_after_s": None, "error": "exited rc=-9"}
    assert L.verdict(summary, "hybrid") == "FAIL: hybrid-t15ng: never served (exited rc=-9)"


def test_walk_graph_switch_reaches_the_speculative_servers(tmp_path, monkeypatch):
    monkeypatch.delenv("DDTREE_WALK_GRAPH", raising=False)
    assert all("SGLANG_DDTREE_WALK_GRAPH" not in s.env for s in L.servers_for("dense", 36000, str(tmp_path), str(tmp_path), "/m"))
    monkeypatch.setenv("DDTREE_WALK_GRAPH", "1")
    got = {s.name: s.env.get("SGLANG_DDTREE_WALK_GRAPH") for s in L.servers_for("dense", 36000, str(tmp_path), str(tmp_path), "/m")}
    assert got["dense-t15"] == got["dense-sl15"] == got["dense-t15ng"] == "1" and got["dense-ref"] is None
