"""The live figures from an instance's own /metrics: a real sglang 0.5.11 exposition (the project's H200 record)
and the lab stand-in's, read through collect.metrics_text as the module returns it."""

from __future__ import annotations

import time
from pathlib import Path

from ansible.module_utils.dflash_status.collect import METRICS, metrics_text
from ansible.module_utils.dflash_status.figures import live_figures
from test_standin import BASE_ARGS, SPEC_ARGS, jpost

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "metrics" / "sglang-0.5.11-h200-dflash.txt"


def test_a_real_sglang_exposition():
    out = live_figures(REAL.read_text())
    # dummy weights: every draft rejected, the accept length is the bonus token only; idle after its smoke test
    assert out == {"accept_length": 1.0, "accept_rate": 0.0, "tokens_per_s": 0.0, "running": 0.0, "queued": 0.0,
                   "token_usage": 0.0, "generation_tokens": 392.0, "idle": True}


def test_a_running_request_or_throughput_is_not_idle():
    # the same exposition with one request running, then with throughput only: never idle (the guard reads an idle
    # instance's accept length as the last batch's, not as a collapse)
    lines = REAL.read_text().splitlines()
    running = "\n".join(ln[:-3] + "1.0" if ln.startswith("sglang:num_running_reqs{") else ln for ln in lines) + "\n"
    assert live_figures(running)["running"] == 1.0 and live_figures(running)["idle"] is False
    busy = "\n".join(ln.rsplit(" ", 1)[0] + " 250.0" if ln.startswith("sglang:gen_throughput{") else ln
                      for ln in lines) + "\n"
    assert live_figures(busy)["tokens_per_s"] == 250.0 and live_figures(busy)["idle"] is False


def test_the_lines_status_keeps_read_the_same():
    text = REAL.read_text()
    kept = "\n".join(ln for ln in text.splitlines()
                     if any(ln.startswith(m + "{") or ln.split()[2:3] == [m] for m in METRICS)) + "\n"
    assert live_figures(kept) == live_figures(text)


def test_the_stand_ins_metrics_through_the_modules_reader(start):
    srv = start([*BASE_ARGS, *SPEC_ARGS, "--enable-metrics"])
    _status, out = jpost(srv.base + "/generate", {"text": "status", "sampling_params": {"max_new_tokens": 64}})
    # the server counts a request as running until its handler has returned, which may come a moment after the
    # client has the reply (seen on a loaded machine): read until it says idle, as a status run a moment later would
    for _ in range(50):
        text, err = metrics_text(srv.base)
        fig = live_figures(text)
        if fig.get("idle"):
            break
        time.sleep(0.1)
    assert err is None and "sglang:spec_accept_length{" in text and "sglang:time_to_first_token" not in text
    assert fig["accept_length"] == round(out["meta_info"]["spec_accept_length"], 4)
    assert fig["generation_tokens"] == 64 and fig["idle"] is True
    # low_accept: the figure status compares with the release's drops
    jpost(srv.base + "/lab/fault", {"fault": "low_accept"})
    jpost(srv.base + "/generate", {"text": "status", "sampling_params": {"max_new_tokens": 64}})
    assert live_figures(metrics_text(srv.base)[0])["accept_length"] < fig["accept_length"]


def test_what_cannot_be_read(start):
    srv = start(BASE_ARGS)  # no --enable-metrics: sglang answers 404
    assert metrics_text(srv.base) == (None, "/metrics answered HTTP 404")
    assert metrics_text("http://127.0.0.1:9")[1].startswith("/metrics: ")
    assert live_figures(None) == {"error": "no /metrics text"}
    assert live_figures("sglang:spec_accept_length{a=\"1\" 2.0\n")["error"].startswith("/metrics is not Prometheus")
