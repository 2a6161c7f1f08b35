"""The gates end to end through dflash_smoke.smoke_all against the lab stand-in server (a real HTTP
server, files/lab/sglang_standin.py) in its bad-release modes, with the measurements recorded in
release directories as the release stage keeps them: a slower release, a lower accept length, a
wrong answer and a degenerate one are refused with a message naming the gate, the figure, the
threshold and both releases; a release within the threshold passes."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.dflash_release import smoke as s
from ansible.module_utils.dflash_release.gates_config import resolve
from test_standin import Server

ARGS = ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--tp-size", "1",
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/dev/shm/draft"]
OPTS = {"timeout": 10}


class StandIn(Server):
    """The stand-in of test_standin.py with this file's flags: args ready for smoke_all."""

    def __init__(self, env=None):
        super().__init__(ARGS, env)
        self.args = [*ARGS, "--port", str(self.port)]
        self.wait_listening()


@pytest.fixture
def releases(tmp_path):
    """Run a release's smoke test of instance 'main' on a stand-in started with ``env``; the
    measurement is kept in <tmp>/<rid>/smoke/main.json as the release stage keeps it."""

    def run(rid, previous, env=None, gates=None):
        rdir = tmp_path / rid
        (rdir / "smoke").mkdir(parents=True)
        (rdir / "manifest.json").write_text(json.dumps({"id": rid, "previous": previous}))
        srv = StandIn(env)
        try:
            insts = [{"name": "main", "args": srv.args, "port": srv.port}]
            res, failed, msgs = s.smoke_all(insts, OPTS, str(rdir / "smoke"), "ct200: ",
                                            {"main": resolve(gates)},
                                            {"release": rid, "previous": previous, "releases_root": str(tmp_path)})
        finally:
            srv.stop()
        status = "failed" if failed else "healthy"
        (rdir / "status.json").write_text(json.dumps({"status": status}))
        return res["main"], (msgs[0] if msgs else "")

    return run


def gate(rec, name):
    return next(r for r in rec["gates"] if r["gate"] == name)


def test_bad_releases_are_refused_naming_gate_figure_threshold_and_releases(releases):
    r1, msg = releases("r1", None)
    assert r1["passed"], msg
    assert r1["perf"]["tokens_per_s_median"] == 500.0 and r1["perf"]["timing"] == "server"
    assert r1["perf"]["accept_length_median"] > 3
    assert "gates ran: output.degenerate ok, output.expect ok, output.code ok, spec.min_accept_length ok" \
        in r1["gates_summary"]
    assert "skipped: perf (no comparable measurement: no previous release given" in r1["gates_summary"]

    # 40% slower
    slow, msg = releases("r2", "r1", {"DFLASH_STANDIN_FAULT": "slower"})
    assert not slow["passed"]
    assert msg.startswith("ct200: instance main: smoke failed: release r2 (previous r1): gate perf.tokens_per_s "
                          "failed: tok/s median 300 (3 runs 300-300) < threshold 425 = 0.85 x 500 tok/s measured "
                          "by release r1")

    # lower accept length (r2 failed: the baseline is still r1)
    low, msg = releases("r3", "r2", {"DFLASH_STANDIN_FAULT": "low_accept"})
    assert not low["passed"] and "gate perf.accept_length failed: accept length median" in msg
    assert f"= 0.85 x {r1['perf']['accept_length_median']:g} measured by release r1" in msg
    assert "release r3 (previous r2)" in msg

    # wrong answer, degenerate answer
    wrong, msg = releases("r4", "r1", {"DFLASH_STANDIN_FAULT": "wrong_answer"})
    assert "gate output.code failed: fibonacci(10) returned 1, expected 55" in msg
    assert gate(wrong, "perf.tokens_per_s")["passed"]  # the speed was fine: only the answer is wrong
    _degen, msg = releases("r5", "r1", {"DFLASH_STANDIN_FAULT": "degenerate"})
    assert "gate output.degenerate failed: content: one character repeated: '!'" in msg

    # within the threshold (5% slower): passes, compared with r1
    ok, msg = releases("r6", "r5", {"DFLASH_STANDIN_TOKENS_PER_S": "475"})
    assert ok["passed"], msg
    tps = gate(ok, "perf.tokens_per_s")
    assert tps["passed"] and tps["baseline_release"] == "r1" and tps["figure"] == 475.0 and tps["threshold"] == 425.0
    assert ok["perf"]["baseline"]["release"] == "r1"


def test_dummy_weight_settings_run_no_output_gate_and_say_so(releases):
    rec, msg = releases("r1", None, {"DFLASH_STANDIN_FAULT": "degenerate"},
                        gates={"output": False, "min_accept_length": 0})
    assert rec["passed"], msg
    assert rec["gates_summary"].startswith("gates ran: none; skipped: output (output gates are off")
    assert "spec.min_accept_length (min_accept_length is 0 (off))" in rec["gates_summary"]
