"""The lab stand-in's fleet behaviour: /metrics only with --enable-metrics, requests in flight,
multi-node ranks (rendezvous on --dist-init-addr, health-only ranks > 0, one rank down takes the
others down)."""

from __future__ import annotations

import threading
import time

import pytest
from test_standin import BASE_ARGS, SPEC_ARGS, Server, free_port, http, jget, jpost


@pytest.fixture
def start():
    servers = []

    def _start(args, env=None):
        srv = Server(args, env)
        servers.append(srv)
        srv.wait_listening()
        return srv

    yield _start
    for srv in servers:
        srv.stop()


def wait_status(url, want, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        status = http("GET", url)[0]
        if status == want:
            return status
        time.sleep(0.1)
    return http("GET", url)[0]


def test_metrics_only_with_enable_metrics(start):
    srv = start(BASE_ARGS)
    assert http("GET", srv.base + "/metrics")[0] == 404
    srv2 = start([*BASE_ARGS, *SPEC_ARGS, "--enable-metrics"])
    jpost(srv2.base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 16}})
    status, raw, _ = http("GET", srv2.base + "/metrics")
    assert status == 200 and b"sglang:spec_accept_length{" in raw


def test_running_requests_are_counted_while_in_flight(start):
    srv = start([*BASE_ARGS, "--enable-metrics"], env={"DFLASH_STANDIN_LATENCY": "1.5"})
    t = threading.Thread(target=jpost, args=(srv.base + "/generate", {"text": "x", "sampling_params": {}}))
    t.start()
    time.sleep(0.5)
    running = [ln for ln in http("GET", srv.base + "/metrics")[1].decode().splitlines()
               if ln.startswith("sglang:num_running_reqs{")]
    t.join()
    after = [ln for ln in http("GET", srv.base + "/metrics")[1].decode().splitlines()
             if ln.startswith("sglang:num_running_reqs{")]
    assert running[0].endswith(" 1.0") and after[0].endswith(" 0.0")


def mn_args(rank, dist_port, nnodes=2, tp="2"):
    return ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--tp-size", tp, "--enable-metrics",
            "--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist_port}"]


def test_two_ranks_meet_and_rank_1_serves_health_only(start):
    dist = free_port()
    r0 = start(mn_args(0, dist))
    assert http("GET", r0.base + "/health")[0] == 503  # waiting for rank 1
    r1 = start(mn_args(1, dist))
    assert wait_status(r0.base + "/health", 200) == 200
    assert wait_status(r1.base + "/health", 200) == 200
    assert jget(r0.base + "/v1/models")[0] == 200
    assert http("GET", r1.base + "/v1/models")[0] == 404
    assert jpost(r1.base + "/generate", {"text": "x"})[0] == 404
    assert http("GET", r1.base + "/metrics")[0] == 200
    info = jget(r0.base + "/get_server_info")[1]
    assert info["nnodes"] == 2 and info["node_rank"] == 0 and info["dist_init_addr"] == f"127.0.0.1:{dist}"


def test_a_rank_that_dies_takes_the_other_down(start):
    dist = free_port()
    r0 = start(mn_args(0, dist))
    r1 = start(mn_args(1, dist))
    assert wait_status(r0.base + "/health", 200) == 200
    r1.proc.kill()
    r0.proc.wait(timeout=10)
    rc, err = r0.stop()
    assert rc == 1 and "NCCL error: remote process exited" in err


@pytest.mark.parametrize("bad, why", [
    (["--nnodes", "3"], "nnodes 3 on rank 1 but 2 on rank 0"),
    (["--tp-size", "4"], "has tp_size 4"),
    (["--random-seed", "7"], "was started with other arguments (another release?)"),
])
def test_ranks_that_disagree_are_refused_and_keep_knocking(start, bad, why):
    dist = free_port()
    r0 = start(mn_args(0, dist), env={"DFLASH_STANDIN_RENDEZVOUS_TIMEOUT": "3"})
    args = mn_args(1, dist)
    if bad[0] in args:
        args[args.index(bad[0]) + 1] = bad[1]
    else:
        args += bad
    r1 = start(args, env={"DFLASH_STANDIN_RENDEZVOUS_TIMEOUT": "3"})
    assert http("GET", r0.base + "/health")[0] == 503
    r0.proc.wait(timeout=15)
    r1.proc.wait(timeout=15)
    rc0, err0 = r0.stop()
    rc1, err1 = r1.stop()
    assert rc0 == 1 and "refused a peer from 127.0.0.1: " in err0 and why in err0
    assert rc1 == 1 and "refused by rank 0: " in err1 and why in err1


def test_a_rank_of_another_release_waits_for_the_right_rank_0(start):
    dist = free_port()
    old0 = start(mn_args(0, dist) + ["--random-seed", "1"])
    new1 = start(mn_args(1, dist) + ["--random-seed", "2"])
    time.sleep(1.5)
    assert http("GET", old0.base + "/health")[0] == 503
    old0.stop()  # the new rank 0 replaces it on the same port
    new0 = start(mn_args(0, dist) + ["--random-seed", "2"])
    assert wait_status(new0.base + "/health", 200) == 200
    assert wait_status(new1.base + "/health", 200) == 200


def test_rank_0_gives_up_after_the_rendezvous_timeout(start):
    r0 = start(mn_args(0, free_port()), env={"DFLASH_STANDIN_RENDEZVOUS_TIMEOUT": "1"})
    r0.proc.wait(timeout=10)
    rc, err = r0.stop()
    assert rc == 1 and "Timed out after 1 seconds waiting for clients. 1/2 clients joined" in err
