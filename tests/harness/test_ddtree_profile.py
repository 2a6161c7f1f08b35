"""gpu-harness/ddtree_profile.py's reduction of a torch-profiler Chrome trace to per-step figures."""

import gzip
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import ddtree_profile as P


def ev(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def test_per_step_figures_from_a_trace_with_overlapping_kernels_and_a_round_trip():
    events = [{"ph": "M", "name": "process_name"},  # metadata events are ignored
              ev("cpu_op", "scheduler idle poll", -5000, 10)]  # before the request: not in the step window
    for step in range(2):  # 2 steps of 1000 us
        t = 1000.0 * step
        events += [
            ev("cuda_runtime", "cudaGraphLaunch", t, 10),
            ev("cuda_runtime", "cudaLaunchKernel", t + 20, 5),
            ev("kernel", "gemm", t + 30, 200),
            ev("kernel", "topk", t + 100, 200),  # overlaps gemm: busy 30..300 = 270 us, kernel sum 400
            ev("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", t + 500, 10),
            ev("cuda_runtime", "cudaStreamSynchronize", t + 490, 30),
            ev("cpu_op", "aten::topk", t + 15, 40),
        ]
    events.append(ev("kernel", "gemm", 1990, 10))  # the window ends at 2000 us
    r = P.summarize_trace({"traceEvents": events}, steps=2)
    assert r["wall_ms"] == 0.985  # first kernel (30 us) to the last GPU activity's end (2000 us), per step
    assert r["gpu_busy_ms"] == round((270 + 10) * 2 / 1000 / 2 + 0.01 / 2, 4)
    assert r["gpu_kernel_ms"] == round((400 * 2 + 10) / 1000 / 2, 4)
    assert (r["kernels"], r["launches"], r["graph_launches"], r["syncs"], r["d2h"]) == (2.5, 1.0, 1.0, 1.0, 1.0)
    assert r["top_kernels"][0] == {"name": "gemm", "total_ms": 0.41, "count": 3, "ms_per_step": 0.205}
    assert r["top_cpu_ops"][0]["name"] == "aten::topk"


def test_empty_or_list_traces():
    r = P.summarize_trace([], steps=0)
    assert r["steps"] == 1 and r["wall_ms"] == 0.0 and r["kernels"] == 0.0 and r["top_kernels"] == []
    assert P.summarize_trace([ev("kernel", "k", 0, 1000)], steps=1)["gpu_busy_ms"] == 1.0


def test_load_trace_reads_gzip(tmp_path):
    p = tmp_path / "x-TP-0.trace.json.gz"
    with gzip.open(p, "wt") as fh:
        json.dump({"traceEvents": [ev("kernel", "k", 0, 500)]}, fh)
    assert P.summarize_trace(P.load_trace(str(p)), 1)["gpu_kernel_ms"] == 0.5


def test_walk_graph_switches_reach_the_ddtree_servers_only(tmp_path, monkeypatch):
    """DDTREE_WALK_GRAPH=0/1 (the e2e bench) sets the walk graph on every DDTREE server, never on DFLASH
    (unset: the servers' default, on since 0106); walk_ab (DDTREE_PROFILE_WALK_AB=1 in the profile) runs
    t15 without it and adds t15w with it."""
    import ddtree_e2e

    names = lambda servers: {s.name: s.env.get("SGLANG_DDTREE_WALK_GRAPH") for s in servers}
    monkeypatch.delenv("DDTREE_WALK_GRAPH", raising=False)
    assert names(ddtree_e2e.bench_servers("hybrid", 37000, str(tmp_path), str(tmp_path))) == {
        "hybrid-t15": None, "hybrid-dflash": None, "hybrid-t31": None}  # fmt: skip
    ab = names(ddtree_e2e.bench_servers("dense", 37000, str(tmp_path), str(tmp_path), walk_ab=True))
    assert ab == {"dense-t15": "0", "dense-dflash": None, "dense-t31": None, "dense-t15w": "1"}
    monkeypatch.setenv("DDTREE_WALK_GRAPH", "1")
    on = names(ddtree_e2e.bench_servers("hybrid", 37000, str(tmp_path), str(tmp_path)))
    assert on == {"hybrid-t15": "1", "hybrid-dflash": None, "hybrid-t31": "1"}
    monkeypatch.setenv("DDTREE_WALK_GRAPH", "0")
    off = names(ddtree_e2e.bench_servers("hybrid", 37000, str(tmp_path), str(tmp_path)))
    assert off == {"hybrid-t15": "0", "hybrid-dflash": None, "hybrid-t31": "0"}


def test_the_profile_takes_b31_only_when_asked(tmp_path):
    import ddtree_e2e

    servers = ddtree_e2e.bench_servers("dense", 37000, str(tmp_path), str(tmp_path), walk_ab=True)
    assert [s.name for s in P.profiled_servers(servers)] == ["dense-t15", "dense-dflash", "dense-t15w"]
    assert [s.name for s in P.profiled_servers(servers, t31=True)] == ["dense-t15", "dense-dflash", "dense-t31", "dense-t15w"]
    # with b31, DFLASH on b31's 32-block draft: the same verify width without the tree
    servers = ddtree_e2e.bench_servers("hybrid", 37000, str(tmp_path), str(tmp_path), dflash32=True)
    picked = P.profiled_servers(servers, t31=True)
    assert [s.name for s in picked] == ["hybrid-t15", "hybrid-dflash", "hybrid-t31", "hybrid-dflash32"]
    assert "hybrid-draft32" in " ".join(picked[-1].cmd) and picked[-1].block == 32
