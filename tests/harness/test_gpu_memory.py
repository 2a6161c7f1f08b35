"""gpu-harness/gpu_memory.py and ddtree_servers.size_for_gpu: the DDTree harnesses' servers sized from the GPU's
memory and their number, not from fractions fixed for a 141 GB H200 (on an 80 GB H100 the third server of
ddtree_e2e, DDTREE b31 on the hybrid, never started)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "gpu-harness"))
import ddtree_e2e
import ddtree_lossless
import ddtree_servers
import gpu_memory as G

# (total, free) MiB as nvidia-smi reports them on the lent machines
H100 = (81559, 80900)
H200 = (143771, 143000)
L4 = (23034, 22800)


def layout(servers):
    return [{"name": s.name, "model": s.family, "args": s.cmd, "verify_tokens": s.verify_tokens} for s in servers]


def e2e_servers(tmp_path, models=("dense", "hybrid"), **kw):
    return [s for i, m in enumerate(models)
            for s in ddtree_e2e.bench_servers(m, 35000 + 200 * i, str(tmp_path), str(tmp_path), **kw)]


def lossless_servers(tmp_path, fp32=False):
    return [s for i, m in enumerate(("hybrid", "dense"))
            for s in ddtree_lossless.servers_for(m, 36000 + 200 * i, str(tmp_path), str(tmp_path), str(tmp_path),
                                                 fp32=fp32)]


def test_what_a_server_needs_follows_the_records():
    # hybrid DDTREE b31 at 8 requests: weights, 8 x 32 verify tokens of state (5.24 GiB in the H200 log), the
    # state cache's 40 slots at its share, the KV cache of 8 long requests
    hybrid_t31 = G.need_mib("hybrid", ["--speculative-algorithm", "DDTREE"], 8, 32)
    assert 8700 < hybrid_t31 < 9000
    assert G.need_mib("hybrid", ["--speculative-algorithm", "DDTREE"], 8, 16) < hybrid_t31 - 2600
    assert G.need_mib("hybrid", ["--speculative-algorithm", "DDTREE"], 4, 32) < 0.62 * hybrid_t31
    dense = G.need_mib("dense", [], 8, 0)
    assert G.need_mib("dense", ["--dtype", "float32"], 8, 0) == 2 * dense
    # the old fixed fraction, of an H100's free memory even for the first server, is less than b31 needs
    assert 0.08 * H100[1] < hybrid_t31 < 0.08 * H200[1]


@pytest.mark.parametrize("gpu", [H100, H200], ids=["h100", "h200"])
def test_the_e2e_layout_fits_both_cards_with_every_pool_holding_its_server(tmp_path, gpu):
    servers = e2e_servers(tmp_path)
    plan = G.plan(*gpu, layout(servers), ddtree_e2e.MAX_TOTAL_TOKENS)
    assert plan.servers == 6 and plan.requests == 8
    for s in servers:
        assert plan.static_mib[s.name] >= G.need_mib(s.family, s.cmd, 8, s.verify_tokens), s.name
    outside = sum(G.outside_mib(s.cmd, ddtree_e2e.MAX_TOTAL_TOKENS) for s in servers)
    assert sum(plan.static_mib.values()) + outside + G.reserve_mib(gpu[0]) == pytest.approx(gpu[1])
    assert plan.knobs(ddtree_e2e.MAX_TOTAL_TOKENS) == {"--max-running-requests": "8", "--max-total-tokens": "40000",
                                                       "--cuda-graph-max-bs": "4"}


def test_more_servers_on_the_h100_step_the_request_and_kv_knobs_down(tmp_path):
    servers = e2e_servers(tmp_path, dflash32=True)  # 8 servers: DFLASH on the 32-block draft too
    assert G.plan(*H200, layout(servers), 40000).requests == 8
    plan = G.plan(*H100, layout(servers), 40000)
    assert plan.requests == 4
    assert plan.knobs(40000) == {"--max-running-requests": "4", "--max-total-tokens": "20000",
                                 "--cuda-graph-max-bs": "4"}
    for s in servers:
        assert plan.static_mib[s.name] >= G.need_mib(s.family, s.cmd, 4, s.verify_tokens), s.name


def test_the_lossless_layouts(tmp_path):
    servers = lossless_servers(tmp_path)  # 12: both models, each with its float32 judge
    assert len(servers) == 12 and G.plan(*H100, layout(servers), 24000).requests == 8
    fp32 = lossless_servers(tmp_path, fp32=True)  # every server float32: twice the memory each
    assert G.plan(*H100, layout(fp32), 24000).requests == 4 and G.plan(*H200, layout(fp32), 24000).requests == 8


def test_a_layout_that_cannot_fit_is_refused_before_anything_starts(tmp_path):
    servers = e2e_servers(tmp_path)
    with pytest.raises(G.MemoryPlanError) as exc:
        G.plan(*L4, layout(servers), 40000)
    msg = str(exc.value)
    assert msg.startswith("6 servers do not fit this GPU: 22800 of 23034 MiB free, 3459 MiB each")
    assert "hybrid-t31 needs a" in msg and "at 4 requests" in msg and "MODELS=hybrid" in msg
    fits = int(msg.split("about ")[1].split()[0])
    assert 0 < fits < 6
    with pytest.raises(G.MemoryPlanError, match="no server"):
        G.plan(*H100, [], 40000)


def test_the_fraction_is_of_the_memory_free_as_the_server_starts():
    assert G.fraction(9534, 80000) == 0.119 and G.fraction(9534, 40000) == 0.238
    assert G.fraction(9534, 40000) * 40000 <= 9534  # never more than the pool
    with pytest.raises(G.MemoryPlanError, match="does not fit the 10000 MiB free now"):
        G.fraction(9534, 10000)


def test_query_reads_nvidia_smi_or_the_given_figures(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$2" = 0 ] && echo "81559, 80211"\n')
    smi.chmod(0o755)
    monkeypatch.delenv(G.GPU_ENV, raising=False)
    assert G.query(0, str(smi)) == (81559, 80211)
    monkeypatch.setenv(G.GPU_ENV, "143771,143000")
    assert G.query(0, str(smi)) == H200


def test_size_for_gpu_sets_the_knobs_and_each_start_its_fraction(tmp_path, monkeypatch):
    monkeypatch.setenv(G.GPU_ENV, f"{H100[0]},{H100[1]}")
    servers = e2e_servers(tmp_path, models=("hybrid",), dflash32=True)
    plan = ddtree_servers.size_for_gpu(servers, 40000)
    t31 = next(s for s in servers if s.name == "hybrid-t31")
    assert "--mem-fraction-static" not in t31.cmd  # sized at its start, from what is free then
    assert t31.cmd[t31.cmd.index("--max-running-requests") + 1] == str(plan.requests) == "8"
    started = []

    class Popen:  # no sglang here: the command it would run is what counts
        def __init__(self, cmd, **kw):
            started.append(cmd)
            self.pid = os.getpid()

    monkeypatch.setattr(ddtree_servers.subprocess, "Popen", Popen)
    monkeypatch.setattr(ddtree_servers.stop_servers, "register", lambda *a: None)
    monkeypatch.setenv(G.GPU_ENV, f"{H100[0]},50000")  # three servers already hold 30 GB
    t31.start()
    frac = float(started[0][started[0].index("--mem-fraction-static") + 1])
    assert frac == G.fraction(t31.static_mib, 50000) and frac * 50000 <= t31.static_mib
    monkeypatch.setenv(G.GPU_ENV, f"{H100[0]},4000")  # something else took the GPU meanwhile
    late = next(s for s in servers if s.name == "hybrid-dflash32")
    late.start()
    assert len(started) == 1 and late.proc is None and late.error.startswith("not started: a ")
