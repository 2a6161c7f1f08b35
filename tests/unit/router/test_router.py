"""The router's workers, settings, arguments and API client (module_utils/dflash_router.py, against a fake of
sglang-router 0.3.2's /workers API)."""

import json

import pytest
from ansible.module_utils import dflash_metrics as metrics
from ansible.module_utils import dflash_router as rt
from test_smoke import FakeTime

# --------------------------------------------------------------------------- router: workers, settings, args

FLEET = {
    "fl-a": {"bind": "0.0.0.0", "address": "mol-fl-a", "instances": [{"name": "w", "port": 30001, "model_path": "/m"}]},
    "fl-c": {"bind": "0.0.0.0", "address": "fd00::3", "instances": [{"name": "tp2", "port": 30002, "model_path": "/m", "gpus": [0, 1]}]},
    "fl-d": {"bind": "0.0.0.0", "address": "mol-fl-d", "instances": [{"name": "mn", "port": 30001, "model_path": "/m", "nnodes": 2,
                                                   "node_rank": 0, "dist_init_addr": "mol-fl-d:29500"}]},
    "fl-e": {"bind": "0.0.0.0", "address": "mol-fl-e", "instances": [{"name": "mn", "port": 30001, "model_path": "/m", "nnodes": 2,
                                                   "node_rank": 1, "dist_init_addr": "mol-fl-d:29500",
                                                   "metrics": False}]},
}
SETTINGS = {"port": 30000, "prometheus_port": 29000, "policy": "round_robin"}


def test_workers_are_the_http_instances():
    w = rt.workers(FLEET)
    assert [x["url"] for x in w] == ["http://mol-fl-a:30001", "http://[fd00::3]:30002", "http://mol-fl-d:30001"]
    assert w[2]["nnodes"] == 2


def test_router_args():
    args = rt.router_args(SETTINGS, rt.workers(FLEET))
    assert args[:4] == ["--host", "0.0.0.0", "--port", "30000"]
    assert args[args.index("--policy") + 1] == "round_robin"
    assert args[args.index("--prometheus-port") + 1] == "29000"
    assert args[args.index("--worker-urls") + 1:] == ["http://mol-fl-a:30001", "http://[fd00::3]:30002",
                                                       "http://mol-fl-d:30001"]


@pytest.mark.parametrize("settings, workers, needle", [
    (dict(SETTINGS, port=80), None, "dflash_router_port: 80 is not a port 1024..65535"),
    (dict(SETTINGS, prometheus_port=30000), None, "dflash_router_prometheus_port: 30000 is also dflash_router_port"),
    (dict(SETTINGS, policy="fastest"), None, "dflash_router_policy: 'fastest' is not one of"),
    (SETTINGS, [], "the router would have no worker"),
    (SETTINGS, [{"model_path": "/a"}, {"model_path": "/b"}], "the workers serve different models (/a, /b)"),
    (dict(SETTINGS, extra_args=["--retry-max-retries 3"]), None, "one argument per item"),
])
def test_router_settings_errors(settings, workers, needle):
    errs = rt.check_settings(settings, rt.workers(FLEET) if workers is None else workers)
    assert any(needle in e for e in errs), errs
    assert rt.check_settings(dict(SETTINGS, allow_mixed_models=True), [{"model_path": "/a"}, {"model_path": "/b"}]) == []


# --------------------------------------------------------------------------- router API client

class FakeRouter:
    """sglang-router 0.3.2's /workers API as observed (202 + background registration), and a worker's /metrics."""

    def __init__(self, workers=(), healthy=True, register_after=1, inflight=(0,)):
        self.workers = {u: {"id": f"id-{i}", "url": u, "is_healthy": healthy, "load": 0}
                        for i, u in enumerate(workers)}
        self.pending = {}
        self.register_after = register_after
        self.inflight = list(inflight)
        self.calls = []
        self.keys = []

    def __call__(self, method, url, body=None, timeout=10.0, api_key=None):
        self.calls.append((method, url))
        self.keys.append(api_key)
        for u in list(self.pending):  # background work progresses one step per call
            self.pending[u] -= 1
            if self.pending[u] <= 0:
                del self.pending[u]
                self.workers[u] = {"id": f"id-{u}", "url": u, "is_healthy": True, "load": 0}
        if url.endswith("/health"):
            return 200, "OK", None
        if url.endswith("/metrics"):
            n = self.inflight.pop(0) if len(self.inflight) > 1 else self.inflight[0]
            if n is None:
                return None, None, "connection refused"
            text = (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{tp_rank=\"0\"}} {n}.0\n"
                    "sglang:num_queue_reqs{tp_rank=\"0\"} 0.0\n")
            return 200, text, None
        if method == "GET" and url.endswith("/workers"):
            return 200, {"workers": list(self.workers.values()), "total": len(self.workers)}, None
        if method == "DELETE":
            wid = url.rsplit("/", 1)[1]
            for u, w in list(self.workers.items()):
                if w["id"] == wid:
                    del self.workers[u]
                    return 202, {"status": "accepted", "worker_id": wid}, None
            return 404, {"error": "not found"}, None
        if method == "POST" and url.endswith("/workers"):
            self.pending[body["url"]] = self.register_after
            return 202, {"status": "accepted"}, None
        if url.endswith("/v1/models"):
            return 200, {"object": "list", "data": [{"id": "/m"}]}, None
        if url.endswith("/v1/chat/completions"):
            return 200, {"choices": [{"message": {"content": "def fibonacci(n): ..."}, "finish_reason": "stop"}],
                         "usage": {"completion_tokens": 12}}, None
        return 404, None, None


def drive(fake, url, state, **kw):
    c = FakeTime()
    return rt.set_worker("http://r:30000", url, state, call=fake, clock=c.clock, sleep=c.sleep, **kw)


def test_drain_removes_by_id_and_waits_for_running_requests():
    fake = FakeRouter(["http://w1:30001", "http://w2:30001"], inflight=(2, 1, 0))
    res = drive(fake, "http://w1:30001", "absent")
    assert res["changed"] and "http://w1:30001" not in fake.workers and res["inflight"] == 0
    assert ("DELETE", "http://r:30000/workers/id-0") in fake.calls
    assert sum(1 for m, u in fake.calls if u.endswith("/metrics")) == 3
    again = drive(fake, "http://w1:30001", "absent")
    assert not again["changed"] and again["warnings"] == []


def test_drain_gives_up_waiting_after_drain_timeout_with_a_warning():
    fake = FakeRouter(["http://w1:30001"], inflight=(5,))
    res = drive(fake, "http://w1:30001", "absent", drain_timeout=2.0)
    assert res["changed"] and "5 request(s) still running after 2 s" in res["warnings"][0]


def test_drain_without_metrics_says_so():
    fake = FakeRouter(["http://w1:30001"], inflight=(None,))
    assert "no /metrics" in drive(fake, "http://w1:30001", "absent")["warnings"][0]


def test_add_back_waits_until_listed_healthy_and_is_idempotent():
    fake = FakeRouter(["http://w2:30001"], register_after=3)
    res = drive(fake, "http://w1:30001", "present")
    assert res["changed"] and fake.workers["http://w1:30001"]["is_healthy"]
    assert not drive(fake, "http://w1:30001", "present")["changed"]


def test_add_back_of_a_worker_that_never_registers_fails_clearly():
    fake = FakeRouter([], register_after=10 ** 9)
    with pytest.raises(rt.RouterError, match="not listed: its health check fails"):
        drive(fake, "http://w1:30001", "present", timeout=3.0)


def test_check_mode_changes_nothing():
    fake = FakeRouter(["http://w1:30001"])
    assert drive(fake, "http://w1:30001", "absent", check_mode=True)["changed"]
    assert "http://w1:30001" in fake.workers and not any(m == "DELETE" for m, _ in fake.calls)


def test_wait_and_smoke_through_the_router():
    fake = FakeRouter(["http://w1:30001"])
    c = FakeTime()
    res = rt.wait_router("http://r:30000", ["http://w1:30001", "http://w9:30001"], timeout=5.0, call=fake,
                         clock=c.clock, sleep=c.sleep)
    assert res["healthy"] == ["http://w1:30001"] and res["missing"] == ["http://w9:30001"]
    rec = rt.smoke_router("http://r:30000", "fibonacci", call=fake)
    assert rec["completion_tokens"] == 12 and rec["model"] == "/m"


def test_router_smoke_sends_the_workers_api_key():
    fake = FakeRouter(["http://w1:30001"])
    rt.smoke_router("http://r:30000", "fibonacci", call=fake, api_key="k-1")
    assert fake.keys == ["k-1", "k-1"]  # /v1/models and the chat completion, as a client of the endpoint
    fake = FakeRouter(["http://w1:30001"])
    rt.smoke_router("http://r:30000", "fibonacci", call=fake)
    assert fake.keys == [None, None]


def test_http_sends_the_key_as_bearer(monkeypatch):
    seen = {}

    def urlopen(req, timeout):
        seen.update(req.headers)
        raise OSError("no network in this test")

    monkeypatch.setattr(rt.urllib.request, "urlopen", urlopen)
    assert rt.http("GET", "http://r:30000/v1/models", api_key="k-1")[2] == "no network in this test"
    assert seen == {"Authorization": "Bearer k-1"}


def test_workers_behind_one_router_share_one_api_key_and_it_is_not_shown():
    fleet = {h: dict(v, instances=[dict(i, api_key="secret-a") for i in v["instances"]]) for h, v in FLEET.items()}
    ws = rt.workers(fleet)
    assert rt.check_settings(SETTINGS, ws) == []
    assert rt.worker_api_key(fleet, ws) == "secret-a" and "secret-a" not in json.dumps(ws)
    fleet["fl-c"]["instances"][0]["api_key"] = "secret-b"
    errs = rt.check_settings(SETTINGS, rt.workers(fleet))
    assert any("do not share one api_key" in e for e in errs) and "secret" not in " ".join(errs)
    assert rt.worker_api_key(FLEET, rt.workers(FLEET)) is None


def test_listen_address_decides_the_url_and_loopback_is_refused_across_hosts():
    fleet = {"a": {"address": "mol-a", "instances": [{"name": "w", "port": 30001}]},  # bind default 127.0.0.1
             "b": {"address": "mol-b", "instances": [{"name": "w", "port": 30001}]},
             "c": {"address": "mol-c", "bind": "0.0.0.0", "instances": [{"name": "w", "port": 30001,
                                                                         "host": "10.0.0.3"}]}}
    ws = rt.workers(fleet)
    assert [w["url"] for w in ws] == ["http://127.0.0.1:30001", "http://127.0.0.1:30001", "http://10.0.0.3:30001"]
    errs = rt.reach_errors(ws, ["a"])
    assert errs == [("b: instance 'w' listens on 127.0.0.1 only: the router on a cannot reach it; set the "
                     "instance's host (or dflash_instances_bind_host) to 0.0.0.0 or an address of that host, "
                     "with an api_key")]
    assert "Prometheus on c" in rt.reach_errors(ws, ["c"], "Prometheus")[0]
    # two inventory hosts of one machine (the same address) reach each other's loopback
    assert rt.reach_errors(ws, {"a": "mol-b"}) == []
    assert {g["targets"][0] for g in metrics.targets(fleet)} == {"127.0.0.1:30001", "10.0.0.3:30001"}


def test_parse_workers_and_metrics_from_router_0_3_2_shapes():
    body = json.loads('{"workers":[{"id":"bcd2","url":"http://127.0.0.1:31001","model_id":"/m","priority":50,'
                      '"cost":1.0,"worker_type":"regular","is_healthy":true,"load":0,"connection_mode":"HTTP"}],'
                      '"total":1,"stats":{"regular_count":1}}')
    assert rt.parse_workers(body) == {"http://127.0.0.1:31001": {"id": "bcd2", "healthy": True, "load": 0}}
    text = ('# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n'
            'sglang:num_running_reqs{model_name="q",engine_type="unified",tp_rank="0"} 3.0\n'
            'sglang:num_queue_reqs{model_name="q",engine_type="unified",tp_rank="0"} 2.0\n')
    assert rt.inflight(text) == 5 and rt.inflight("smg_http_connections_active 0\n") is None


def test_router_port_taken_by_an_instance_of_its_host():
    errs = rt.check_settings(SETTINGS, rt.workers(FLEET), [{"name": "w", "port": 30000}])
    assert errs == ["dflash_router_port: 30000 is also the port of instance 'w' on this host"]
