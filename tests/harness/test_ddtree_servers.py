"""gpu-harness/ddtree_servers.py: a port that answers something other than HTTP while a server starts
is "not healthy yet", not a crash of the whole GPU call (an H200 run of 2026-12-03 lost a call so:
a starting server's port gave our own request line back, http.client.BadStatusLine)."""

import os
import socket
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import ddtree_servers as S


def echo_port():
    """A listener that sends each connection's first bytes back (not HTTP), as that port did."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(1024))

    threading.Thread(target=serve, daemon=True).start()
    return sock


def test_a_non_http_answer_is_not_healthy_and_does_not_raise(tmp_path):
    sock = echo_port()
    port = sock.getsockname()[1]
    srv = S.Server("echo", port, [], str(tmp_path), str(tmp_path))
    srv.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    srv.t0 = 0.0
    try:
        assert srv.check_health() is False and srv.healthy_after is None
        assert srv.flush_cache() is False
        try:
            srv.generate([1, 2], 4, timeout=5)
        except S.HTTP_ERRORS:
            pass  # the harnesses catch exactly these around each request
        else:
            raise AssertionError("a non-HTTP answer to /generate must raise one of HTTP_ERRORS")
    finally:
        srv.proc.kill()
        srv.proc.wait()
        sock.close()


def test_the_step_time_is_the_median_whole_step_and_its_ratio_is_dflash_over_the_server(tmp_path):
    """gpu-harness/ddtree_e2e.py: step_ms is the median of per-step sums (prepare + target + verify +
    draft append), and at matched acceptance DFLASH's step_ms over a server's is its speed estimate."""
    import json

    import ddtree_e2e as E

    def steps(path, totals):
        with open(path, "w") as fh:
            for i, total in enumerate(totals):
                rec = {"algo": "x", "bs": 1, "width": 16, "cuda_graph": True, "accepted": 6,
                       "prepare_ms": total - 3.0, "target_ms": 2.0, "verify_ms": 0.5, "draft_append_ms": 0.5,
                       "draft_ms": 1.0 + i, "tree_ms": None}  # fmt: skip
                fh.write(json.dumps(rec) + "\n")

    srv = S.Server("d", 1, [], str(tmp_path), str(tmp_path), env={"SGLANG_DFLASH_STEP_TIMING": str(tmp_path / "d")})
    steps(tmp_path / "d", [6.0, 5.0, 9.0])
    med = E.step_timing(srv, 0)
    assert med["step_ms"] == 6.0 and med["steps"] == 3 and "tree_ms" not in med
    timing = {"dense-dflash": {"step_ms": 6.0, "width": 16}, "dense-t15": {"step_ms": 5.0, "width": 16},
              "dense-t31": {"step_ms": 7.5, "width": 32}, "dense-t99": {"width": 16}}  # fmt: skip
    assert E.step_speed_vs_dflash(timing, "dense-dflash") == {"dense-t15": 1.2, "dense-t31": 0.8}
    assert E.step_speed_vs_dflash({"dense-t15": {"step_ms": 5.0}}, "dense-dflash") == {}


def test_the_series_switches_set_for_a_run_reach_the_servers_and_nothing_else_does():
    env = {"DDTREE_GDN_TREE_PATHS": "1", "DDTREE_GDN_VERIFY_BLOCK_V": "32", "DDTREE_BUILD_KERNEL": "0",
           "DDTREE_WALK_GRAPH": "", "PATH": "/bin", "SGLANG_DDTREE_ORACLE": "x", "DDTREE_CONV_PARENTS": "1",
           "DDTREE_CONV_BLOCK_N": "128"}  # fmt: skip
    assert S.passed_env(env) == {"SGLANG_GDN_TREE_PATHS": "1", "SGLANG_GDN_VERIFY_BLOCK_V": "32",
                                 "SGLANG_DDTREE_BUILD_KERNEL": "0", "SGLANG_DDTREE_CONV_PARENTS": "1",
                                 "SGLANG_DDTREE_CONV_BLOCK_N": "128"}  # fmt: skip
    env["DDTREE_WALK_GRAPH"] = "0"
    assert S.passed_env(env)["SGLANG_DDTREE_WALK_GRAPH"] == "0"
    assert "SGLANG_DDTREE_WALK_GRAPH" not in S.passed_env(env, skip=("DDTREE_WALK_GRAPH",))
    assert S.passed_env({}) == {}


def test_the_e2e_servers_carry_the_gdn_switches(tmp_path, monkeypatch):
    import ddtree_e2e

    monkeypatch.setenv("DDTREE_GDN_TREE_PATHS", "1")
    monkeypatch.setenv("DDTREE_WALK_GRAPH", "0")
    for srv in ddtree_e2e.bench_servers("hybrid", 37000, str(tmp_path), str(tmp_path), dflash32=True):
        assert srv.env["SGLANG_GDN_TREE_PATHS"] == "1", srv.name
        # the walk switch stays the e2e's own (DDTREE servers only)
        assert srv.env.get("SGLANG_DDTREE_WALK_GRAPH") == (None if "dflash" in srv.name else "0"), srv.name


def test_rounds_interleave_the_servers_prompt_by_prompt_rotating_their_order():
    import ddtree_e2e as E

    class Srv:
        def __init__(self, name):
            self.name = name

    servers = [Srv("dflash"), Srv("t15"), Srv("t31")]
    calls = []

    def one(srv, k):
        calls.append((srv.name, k))
        if srv.name == "t31" and len(calls) > 20:  # t31 fails in round 2 (its 21st+ call overall)
            raise OSError("gone")
        return {"tokens": 100, "secs": 0.1 if srv.name == "dflash" else 0.2, "accept_length": 4.0, "identical": True}

    rows = E.interleaved_rounds(servers, 3, 3, one, lambda srv: True)
    # round 0: prompt 0 on dflash, t15, t31, then prompt 1 ...; round 1 starts with t15, round 2 with t31
    assert calls[:6] == [("dflash", 0), ("t15", 0), ("t31", 0), ("dflash", 1), ("t15", 1), ("t31", 1)]
    assert calls[9:12] == [("t15", 0), ("t31", 0), ("dflash", 0)]
    assert calls[18:21] == [("t31", 0), ("dflash", 0), ("t15", 0)]
    assert [r["tok_s"] for r in rows["dflash"]] == [1000.0] * 3 and [r["tok_s"] for r in rows["t15"]] == [500.0] * 3
    assert [r["round"] for r in rows["t31"]] == [0, 1, 2] and rows["t31"][2] == {"round": 2, "error": "OSError: gone"}
    assert all(r["accept_length"] == 4.0 and r["identical"] for r in rows["dflash"])
    # a server that stops being ok mid-round (deadline) leaves that round out, the others keep theirs
    calls.clear()
    rows = E.interleaved_rounds(servers[:2], 3, 2, one, lambda srv: srv.name == "dflash" or len(calls) < 8)
    assert calls[6:] == [("t15", 0), ("dflash", 0), ("dflash", 1), ("dflash", 2)]
    assert [r["round"] for r in rows["dflash"]] == [0, 1] and [r["round"] for r in rows["t15"]] == [0]
