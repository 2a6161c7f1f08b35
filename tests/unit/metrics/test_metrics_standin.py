"""The lab stand-in's /metrics as the metrics stage needs it: only names sglang 0.5.11 exports, every
sglang name the alert rules and the dashboard read (but the few it never has a reason to count), values
that follow what it does, and a running server whose accept length can be made to drop (POST /lab/fault)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml
from metrics_role import DASHBOARD
from prometheus_client.parser import text_string_to_metric_families
from promql_names import grafana_expr, metric_names
from test_metrics_exported import dashboard_queries, exported_series
from test_standin import BASE_ARGS, SPEC_ARGS, Server, http, jpost

# sglang exports these only once something happened that the stand-in never does
NEVER_IN_STANDIN = {"sglang:num_retracted_requests_total", "sglang:num_aborted_requests_total",
                    "sglang:queue_time_seconds_bucket"}


def scrape(srv) -> dict:
    """{series name: [(labels, value)]} as Prometheus's own client library parses the text."""
    status, raw, _ = http("GET", srv.base + "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(raw.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def value(metrics, name, **labels):
    return next(v for lab, v in metrics[name] if all(lab.get(k) == w for k, w in labels.items()))


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


@pytest.fixture
def fast(start):
    return start([*BASE_ARGS, *SPEC_ARGS, "--enable-metrics"], env={"DFLASH_STANDIN_TOKENS_PER_S": "1000"})


def test_names_are_sglangs_and_cover_what_rules_and_dashboard_read(fast, rendered):
    jpost(fast.base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 32}})
    names = set(scrape(fast))
    assert names - exported_series() == set()
    rules = [r["expr"] for g in yaml.safe_load(rendered["rules"].read_text())["groups"] for r in g["rules"]]
    queries = [grafana_expr(q) for q in dashboard_queries(json.loads(DASHBOARD.read_text()))]
    read = set().union(*(metric_names(q) for q in rules + queries))
    sglang_read = {n for n in read if n.startswith("sglang:")}
    assert sglang_read - NEVER_IN_STANDIN <= names, sglang_read - NEVER_IN_STANDIN - names


def test_values_follow_the_simulated_decoding(fast):
    out = jpost(fast.base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 32}})[1]
    jpost(fast.base + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
    m = scrape(fast)
    model = {"model_name": "/dev/shm/Qwen3.6-27B", "engine_type": "unified"}
    assert value(m, "sglang:generation_tokens_total", **model) == 32 + 8
    assert value(m, "sglang:num_requests_total", **model) == 2
    # one token every 1/1000 s: 31 + 7 inter-token gaps, a first token each, the whole reply end to end
    assert value(m, "sglang:inter_token_latency_seconds_count", **model) == 38
    assert value(m, "sglang:inter_token_latency_seconds_sum", **model) == pytest.approx(0.038)
    assert value(m, "sglang:inter_token_latency_seconds_bucket", le="0.002", **model) == 38
    assert value(m, "sglang:time_to_first_token_seconds_count", **model) == 2
    assert value(m, "sglang:e2e_request_latency_seconds_sum", **model) == pytest.approx(0.040)
    # scheduler gauges carry the ranks, as sglang's do; idle: nothing running, no throughput
    ranks = dict(model, tp_rank="0", pp_rank="0", moe_ep_rank="0")
    assert value(m, "sglang:num_running_reqs", **ranks) == 0 and value(m, "sglang:gen_throughput", **ranks) == 0
    assert value(m, "sglang:spec_accept_length", **ranks) > 1.0  # the chat's verify steps count too
    assert out["meta_info"]["spec_accept_length"] > 1.0
    assert m["sglang:process_cpu_seconds_total"] == [({"component": "tokenizer"}, pytest.approx(
        m["sglang:process_cpu_seconds_total"][0][1]))]


def test_throughput_while_a_request_decodes(start):
    srv = start([*BASE_ARGS, "--enable-metrics"], env={"DFLASH_STANDIN_TOKENS_PER_S": "200"})
    t = threading.Thread(target=jpost, args=(srv.base + "/generate", {"text": "x", "sampling_params":
                                                                      {"max_new_tokens": 400}}))
    t.start()
    time.sleep(0.5)
    during = scrape(srv)
    t.join()
    assert value(during, "sglang:num_running_reqs") == 1 and value(during, "sglang:gen_throughput") == 200
    assert value(scrape(srv), "sglang:gen_throughput") == 0


def mean_accept(srv, n=6) -> float:
    got = [jpost(srv.base + "/generate", {"text": f"q{i}", "sampling_params": {"max_new_tokens": 128}})[1]
           ["meta_info"]["spec_accept_length"] for i in range(n)]
    return sum(got) / len(got)


def test_lab_fault_makes_the_accept_length_drop_and_come_back(fast):
    normal = mean_accept(fast)
    assert normal > 3.5
    status, out = jpost(fast.base + "/lab/fault", {"fault": "low_accept"})
    assert status == 200 and out == {"fault": "low_accept", "lab_standin": True}
    low = mean_accept(fast)
    assert low < 2.5 and value(scrape(fast), "sglang:spec_accept_length", tp_rank="0") < 2.5
    assert jpost(fast.base + "/lab/fault", {"fault": ""})[0] == 200
    assert mean_accept(fast) > 3.5
    # the broken replies switch at run time too: each request reads the mode as it is answered
    ask = {"text": "Write a Fibonacci function", "sampling_params": {"max_new_tokens": 64, "temperature": 0}}
    good = jpost(fast.base + "/generate", ask)[1]["text"]
    assert jpost(fast.base + "/lab/fault", {"fault": "regurgitation"})[0] == 200
    assert jpost(fast.base + "/generate", ask)[1]["text"].startswith("<|im_start|>user")
    assert jpost(fast.base + "/lab/fault", {"fault": ""})[0] == 200
    assert jpost(fast.base + "/generate", ask)[1]["text"] == good
    for bad in ({"fault": "crash"}, {"fault": "slower"}, {}, {"fault": 3}):
        status, out = jpost(fast.base + "/lab/fault", bad)
        assert status == 400 and "set at start" in out["message"]


def test_lab_fault_needs_the_api_key(start):
    srv = start([*BASE_ARGS, "--enable-metrics", "--api-key", "k1"])
    assert jpost(srv.base + "/lab/fault", {"fault": "low_accept"})[0] == 401
    status, _, _ = http("POST", srv.base + "/lab/fault", {"fault": "low_accept"},
                        headers={"authorization": "Bearer k1"})
    assert status == 200
