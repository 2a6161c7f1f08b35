"""Smoke gates over real replies (tests/fixtures/replies/), the sandboxed code check, the settings,
the performance baseline across releases, and the failure message (gate, figure, threshold, both
releases)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ansible.module_utils.dflash_release import gates as g
from ansible.module_utils.dflash_release import gates_config as cfg
from ansible.module_utils.dflash_release import gates_output as out
from ansible.module_utils.dflash_release import gates_perf as perf

ROOT = Path(__file__).resolve().parents[3]
REPLIES = ROOT / "tests" / "fixtures" / "replies"
FIB_GATES = cfg.resolve()


def reply(name):
    data = json.loads((REPLIES / name).read_text())
    return data["message"], data["finish_reason"]


def by_gate(results):
    return {r["gate"]: r for r in results}


GOOD_CODE = "```python\ndef fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n```"


# --------------------------------------------------------------------------- real replies


def test_every_reply_fixture_has_a_source():
    files = sorted(REPLIES.glob("*.json"))
    assert len(files) >= 3
    for f in files:
        data = json.loads(f.read_text())
        assert data["source"] and "message" in data and "finish_reason" in data, f


def test_seeds_ct200_reply_is_read_from_reasoning_and_named_as_cut():
    msg, fin = reply("seeds-ct200-reasoning-cut.json")
    res = by_gate(g.output_gates(msg, fin, FIB_GATES))
    # the text is in reasoning_content: it is real text, not garbage
    assert res["output.degenerate"]["passed"]
    # ... but it stops while thinking: no def, no code; the message says why and what to do
    assert not res["output.expect"]["passed"]
    assert "cut at max_tokens" in res["output.expect"]["detail"]
    assert "reasoning model thinks first" in res["output.expect"]["detail"]
    assert not res["output.code"]["passed"] and "no Python code defining fibonacci" in res["output.code"]["detail"]


def test_seeds_ct129_exclamation_marks_are_degenerate():
    msg, fin = reply("seeds-ct129-exclamation.json")
    res = by_gate(g.output_gates(msg, fin, FIB_GATES))
    assert not res["output.degenerate"]["passed"]
    assert "one character repeated: '!'" in res["output.degenerate"]["detail"]


def test_h200_dummy_garbage_is_degenerate():
    msg, fin = reply("h200-dummy-garbage.json")
    res = by_gate(g.output_gates(msg, fin, FIB_GATES))
    assert not res["output.degenerate"]["passed"]
    assert "cycle of 2 word(s) repeated" in res["output.degenerate"]["detail"]
    assert not res["output.expect"]["passed"]


def test_dummy_weights_switch_the_output_gates_off_and_say_so():
    msg, fin = reply("h200-dummy-garbage.json")
    res = g.output_gates(msg, fin, cfg.resolve(host_gates={"output": False}))
    assert res == [{"gate": "output", "ran": False,
                    "reason": "output gates are off (smoke_gates.output: false, e.g. dummy weights)"}]
    assert "skipped: output (output gates are off" in g.summary(res)


def test_reasoning_reply_that_finishes_passes_with_the_code_in_content():
    # a reasoning model given enough tokens: the thinking, then the answer in content
    msg = {"content": GOOD_CODE, "reasoning_content": "Here's a thinking process:\n\n1. keep a and b ..."}
    res = by_gate(g.output_gates(msg, "stop", FIB_GATES))
    assert all(r["passed"] for r in res.values()), res
    assert res["output.code"]["detail"] == "fibonacci(10) returned 55"


def test_code_only_in_reasoning_is_still_found():
    msg = {"content": None, "reasoning_content": "Plan: iterate.\n" + GOOD_CODE}
    res = by_gate(g.output_gates(msg, "stop", FIB_GATES))
    assert res["output.expect"]["passed"] and "reasoning_content" in res["output.expect"]["detail"]
    assert res["output.code"]["passed"]


def test_wrong_function_fails_the_code_check_with_the_value():
    # a def and a loop, but not fibonacci (what the stand-in's wrong_answer mode returns)
    msg = {"content": "```python\ndef fibonacci(n):\n    a, b = 1, 1\n    for _ in range(n):\n"
                      "        a, b = b, a * b\n    return a\n```"}
    res = by_gate(g.output_gates(msg, "stop", FIB_GATES))
    assert res["output.expect"]["passed"]
    assert not res["output.code"]["passed"]
    assert res["output.code"]["detail"] == "fibonacci(10) returned 1, expected 55"
    assert res["output.code"]["figure"] == "1" and res["output.code"]["threshold"] == [55]


def test_recursive_function_misses_the_loop_pattern():
    msg = {"content": "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"}
    res = by_gate(g.output_gates(msg, "stop", FIB_GATES))
    assert not res["output.expect"]["passed"] and "(?:for|while)" in res["output.expect"]["detail"]
    assert res["output.code"]["passed"]  # right value, but the prompt asked for iteration


def test_code_that_loops_forever_is_stopped_by_the_timeout():
    msg = {"content": "def fibonacci(n):\n    a, b = 0, 1\n    while True:\n        a, b = b, a + b\n    return a\n"}
    t0 = time.monotonic()
    res = by_gate(g.output_gates(msg, "stop", cfg.resolve({"code_timeout": 1.5})))
    assert time.monotonic() - t0 < 10
    assert not res["output.code"]["passed"]
    assert "fibonacci(10) did not return within 1.5 s" in res["output.code"]["detail"]


def test_code_with_prose_after_it_and_unfenced():
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nThis runs in O(n)."
    assert out.extract_code(text, "fibonacci").endswith("return a")
    assert out.run_code(out.extract_code(text, "fibonacci"), "fibonacci", [10])["value"] == 55


# --------------------------------------------------------------------------- the sandbox


@pytest.mark.parametrize(("code", "needle"), [
    ("import socket\ndef fibonacci(n): return 55", "import of socket is not allowed"),
    ("def fibonacci(n):\n    import os\n    os.system('true')\n    return 55", "os.system is not allowed"),
    ("def fibonacci(n):\n    open('/tmp/dflash-gate-x', 'w').write('x')\n    return 55", "writing '/tmp/dflash-gate-x'"),
    ("def fibonacci(n):\n    import subprocess\n    return 55", "import of subprocess is not allowed"),
    ("def fibonacci(n):\n    x = bytearray(2 * 1024 ** 3)\n    return 55", "MemoryError"),
    ("def fibonacci(n):\n    raise ValueError('no')", "ValueError: no"),
    ("x = 1", "defines no function fibonacci"),
])
def test_sandbox_refuses_network_processes_writes_and_memory(code, needle):
    res = out.run_code(code, "fibonacci", [10], timeout=5)
    assert not res["ok"] and needle in res["error"], res
    assert not Path("/tmp/dflash-gate-x").exists()


def test_sandbox_interpreter_for_root_is_one_nobody_may_run(tmp_path):
    assert out.world_runnable("/usr/bin/env")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    exe = private / "python3"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert not out.world_runnable(str(exe))
    py, uid, note = out.sandbox_python(str(exe), as_root=True)
    assert py != str(exe) and uid == out.NOBODY and note == f"as uid {out.NOBODY}"
    assert out.sandbox_python(str(exe), as_root=False) == (str(exe), None, "")


# --------------------------------------------------------------------------- degenerate detector


@pytest.mark.parametrize(("text", "needle"), [
    ("\ufffd\ufffd\ufffd abc", "replacement characters"),
    ("the the the the the the the the the the the the the", "cycle of 1 word"),
    ("ab" * 30, "cycle of 2 characters"),
    (" ".join(["alpha", "beta", "gamma"] * 20), "cycle of 3 word"),
])
def test_degenerate_shapes(text, needle):
    assert needle in out.degenerate(text)


@pytest.mark.parametrize("text", [
    GOOD_CODE,
    "Here's a thinking process:\n\n1. **Understand User Request:**\n - Function name: fibonacci(n)",
    "55",
    "def f():\n    return [0, 0, 0, 0]",
])
def test_real_text_is_not_degenerate(text):
    assert out.degenerate(text) is None


def test_empty_reply_is_degenerate():
    res = by_gate(g.output_gates({"content": "", "reasoning_content": None}, "stop", FIB_GATES))
    assert "neither content nor reasoning_content" in res["output.degenerate"]["detail"]


# --------------------------------------------------------------------------- settings


def test_defaults_follow_the_prompt_and_reasoning():
    assert FIB_GATES["expect"] == cfg.FIBONACCI_EXPECT and FIB_GATES["code_check"] is True
    custom = cfg.resolve(prompt="Say hello.")
    assert custom["expect"] == [] and custom["code_check"] is False
    assert cfg.resolve(reasoning=True)["max_tokens"] == 1024
    assert cfg.resolve({"max_tokens": 300}, reasoning=True)["max_tokens"] == 300
    merged = cfg.resolve({"perf_ratio": 0.9}, {"perf_ratio": 0.5, "output": False})
    assert merged["perf_ratio"] == 0.9 and merged["output"] is False


def test_gate_errors_name_every_bad_field():
    errs = dict(cfg.gate_errors({"perf_ratio": 1.5, "perf_samples": 0, "expect": ["(unclosed"], "bogus": 1,
                                 "code_function": "not a name", "min_accept_length": -1, "output": "yes",
                                 "code_expect": []}))
    assert set(errs) == {"smoke_gates.perf_ratio", "smoke_gates.perf_samples", "smoke_gates.expect[0]",
                         "smoke_gates.bogus", "smoke_gates.code_function", "smoke_gates.min_accept_length",
                         "smoke_gates.output", "smoke_gates.code_expect"}
    assert "(0, 1]" in errs["smoke_gates.perf_ratio"]
    assert cfg.gate_errors(None) == [] and cfg.gate_errors({}) == []
    assert cfg.host_gate_errors("ct200", {"perf": 1}) == [
        "ct200: field 'dflash_smoke_gates.perf': must be true or false, got 1"]


# --------------------------------------------------------------------------- performance


def write_release(root: Path, rid, previous=None, perf_rec=None, status="healthy", name="main", passed=True):
    d = root / rid
    (d / "smoke").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"id": rid, "previous": previous}))
    (d / "status.json").write_text(json.dumps({"status": status}))
    if perf_rec is not None:
        (d / "smoke" / f"{name}.json").write_text(json.dumps({"smoke": {"passed": passed, "perf": perf_rec}}))
    return d


COND = {"prompt": cfg.FIBONACCI_PROMPT, "max_new_tokens": 64, "model_path": "/m", "timing": "server",
        "stand_in": "a stand-in"}


def measured(tps, acc=4.0):
    return {"samples": [{}, {}, {}], "tokens_per_s_median": tps, "tokens_per_s_range": [tps, tps],
            "accept_length_median": acc, "conditions": COND}


def test_baseline_walks_back_to_a_comparable_passed_measurement(tmp_path):
    write_release(tmp_path, "r1", None, measured(400.0))
    write_release(tmp_path, "r2", "r1", measured(900.0), status="failed")
    write_release(tmp_path, "r3", "r2", None)  # main was not smoke-tested in r3
    write_release(tmp_path, "r4", "r3", dict(measured(100.0), conditions=dict(COND, model_path="/other")))
    base, notes = perf.find_baseline(str(tmp_path), "r4", "main", COND)
    assert base["release"] == "r1" and base["tokens_per_s_median"] == 400.0
    assert notes == ["r4 measured main under other conditions (model_path differ)",
                     "r3 has no smoke record of main", "r2 failed its smoke test"]
    assert perf.find_baseline(str(tmp_path), None, "main", COND) == (None, [])


def test_perf_gates_name_figure_threshold_and_both_releases(tmp_path):
    base = dict(measured(400.0, 4.0), release="r1")
    res = by_gate(perf.judge(measured(240.0, 2.2), base, FIB_GATES, speculative=True))
    tps = res["perf.tokens_per_s"]
    assert not tps["passed"] and tps["figure"] == 240.0 and tps["threshold"] == 340.0
    assert tps["detail"] == ("tok/s median 240 (3 runs 240-240) < threshold 340 = 0.85 x 400 tok/s "
                             "measured by release r1")
    acc = res["perf.accept_length"]
    assert not acc["passed"] and acc["threshold"] == 3.4
    assert res["spec.min_accept_length"]["passed"]  # 2.2 >= 1.5
    msg = g.failure(list(res.values()), {"release": "r2", "previous": "r1"})
    assert msg.startswith("release r2 (previous r1): gate perf.tokens_per_s failed: tok/s median 240 ")
    assert "gate perf.accept_length failed: accept length median 2.2" in msg
    # within the threshold: passes
    ok = by_gate(perf.judge(measured(380.0, 3.9), base, FIB_GATES, speculative=True))
    assert ok["perf.tokens_per_s"]["passed"] and ok["perf.accept_length"]["passed"]


def test_min_accept_length_and_first_deploy():
    res = by_gate(perf.judge(measured(400.0, 1.02), None, FIB_GATES, speculative=True,
                             notes=["no previous release given"]))
    assert not res["spec.min_accept_length"]["passed"]
    assert res["spec.min_accept_length"]["detail"] == "accept length median 1.02 (3 runs) < minimum 1.5"
    assert not res["perf"]["ran"] and "no previous release given" in res["perf"]["reason"]
    plain = by_gate(perf.judge(measured(600.0, None), None, cfg.resolve({"min_accept_length": 0}), False))
    assert "spec.min_accept_length" not in plain


def test_parse_sample_prefers_the_servers_latency():
    s = perf.parse_sample(200, {"meta_info": {"completion_tokens": 64, "e2e_latency": 0.5, "spec_verify_ct": 16}},
                          0.9)
    assert s["timing"] == "server" and s["tokens_per_s"] == 128.0 and s["accept_length"] == 4.0
    c = perf.parse_sample(200, {"meta_info": {"completion_tokens": 64}}, 0.5)
    assert c["timing"] == "client" and c["tokens_per_s"] == 128.0 and c["accept_length"] is None
    with pytest.raises(perf.PerfError, match="HTTP 500"):
        perf.parse_sample(500, {"error": "x"}, 0.1)
