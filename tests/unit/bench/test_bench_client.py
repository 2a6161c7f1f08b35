"""The benchmark client against the lab stand-in server (a real process on loopback): streamed
/generate, per-request acceptance, the agentic workload's growing conversation and prefix reuse,
bounds, failures; and the cell figures against numpy's percentiles."""

import time

import numpy as np
import pytest
from ansible.module_utils.dflash_bench import client as cl
from ansible.module_utils.dflash_bench import stats as st
from ansible.module_utils.dflash_bench import workloads as wl
from test_standin import free_port, start_standin


@pytest.fixture(scope="module")
def ddtree():
    proc, url = start_standin("--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/d",
                              "--speculative-ddtree-budget", "15", "--speculative-ddtree-topk", "8")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def plain():
    proc, url = start_standin()
    yield url
    proc.terminate()
    proc.wait(10)


def test_stream_generate_reads_the_last_chunks_spec_fields(ddtree):
    rec = cl.stream_generate(ddtree, {"input_ids": list(range(1000, 1032)), "sampling_params": wl.sampling(64)}, 30)
    assert rec["ok"] and rec["completion_tokens"] == 64 and rec["prompt_tokens"] == 32
    # one chunk per verify step: completion / verify steps = the accept length the server reports
    assert rec["chunks"] == rec["spec_verify_ct"]
    assert rec["spec_accept_length"] == pytest.approx(64 / rec["spec_verify_ct"])
    # the first chunk's tokens make the TTFT; every later token gets its share of its chunk's gap
    assert rec["ttft"] > 0 and 0 < len(rec["itl"]) < 64 and all(x >= 0 for x in rec["itl"])
    assert rec["finish_reason"] == "length"


@pytest.mark.parametrize("version", ["0.5.11", "0.5.17", "0.5.23"])
def test_the_draft_counts_keep_the_records_names_across_versions(version):
    """0.5.11 names them spec_accepted_drafts / spec_proposed_drafts, 0.5.23 spec_num_correct_drafts /
    spec_num_proposed_drafts only (0.5.17 both): the record keeps one name for every version."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_STANDIN") and k != "PYTHONPATH"}
    proc, url = start_standin("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d",
                              env=dict(env, DFLASH_STANDIN_SGLANG_VERSION=version))
    try:
        rec = cl.stream_generate(url, {"input_ids": list(range(1000, 1032)), "sampling_params": wl.sampling(64)}, 30)
    finally:
        proc.terminate()
        proc.wait(10)
    assert rec["spec_accepted_drafts"] == 64 - rec["spec_verify_ct"]
    assert rec["spec_proposed_drafts"] == rec["spec_verify_ct"] * 15


def test_seeds_cell_on_ddtree(ddtree):
    cell = cl.run_cell(ddtree, "seeds", 2, {"seeds_max_tokens": 32}, timeout=60)
    s = cell["summary"]
    assert cell["status"] == "ok" and s["requests"] == 6 and s["completed"] == 6 and s["output_tokens"] == 6 * 32
    assert s["accept_length"] == pytest.approx(s["output_tokens"] / s["spec_verify_ct"], abs=1e-3)
    assert 1.0 < s["accept_length"] < 16 and s["output_tok_s"] > 0 and s["ttft_p50_ms"] > 0
    after = cell["server_after"]
    assert after["server_info"]["stand_in"].startswith("dflash-deploy lab stand-in") and after["server_info"]["speculative_algorithm"] == "DDTREE"
    assert after["metrics"]["spec_accept_length"] > 0
    assert {r["label"] for r in cell["requests"]} == {f"{p}#{k}" for p in ("fibonacci", "quicksort", "arithmetic")
                                                      for k in (0, 1)}


def test_agent_sessions_grow_and_reuse_their_prefix(ddtree):
    cell = cl.run_cell(ddtree, "agent", 2, {"agent": {"turns": 3, "max_tokens": 16}}, timeout=60)
    assert cell["status"] == "ok" and cell["summary"]["requests"] == 6
    for worker in (0, 1):
        turns = sorted((r for r in cell["requests"] if r["worker"] == worker), key=lambda r: r["turn"])
        prompts = [r["prompt_tokens"] for r in turns]
        assert prompts == sorted(prompts) and prompts[0] < prompts[-1]
        # every later turn resends the previous conversation: most of it is a cached prefix
        assert all(r["cached_tokens"] >= prev for r, prev in zip(turns[1:], prompts[:-1], strict=True))
    assert cell["summary"]["cached_ratio"] > 0.3


def test_no_speculation_has_no_acceptance(plain):
    cell = cl.run_cell(plain, "random", 1, {"random": {"input_len": 16, "output_len": 16, "per_slot": 2}},
                       timeout=30)
    assert cell["status"] == "ok" and cell["summary"]["output_tokens"] == 32
    assert cell["summary"]["accept_length"] is None and cell["summary"]["spec_verify_ct"] is None
    assert all(r["chunks"] == 16 for r in cell["requests"])  # one chunk per token


def test_a_dead_server_fails_the_cell_with_the_error():
    cell = cl.run_cell(f"http://127.0.0.1:{free_port()}", "seeds", 1, {"seeds_max_tokens": 8}, timeout=5)
    assert cell["status"] == "failed" and cell["summary"]["completed"] == 0
    assert any("Connection refused" in e or "ConnectionRefused" in e for e in cell["errors"])
    assert "metrics_error" in cell["server_after"]


def test_the_cell_is_bounded(ddtree):
    t = time.monotonic()
    cell = cl.run_cell(ddtree, "random", 1, {"random": {"input_len": 8, "output_len": 4000, "per_slot": 3}},
                       timeout=1.5)
    assert time.monotonic() - t < 10
    assert cell["status"] in ("partial", "failed") and cell["summary"]["completed"] < 3
    assert cell["summary"]["skipped"] + cell["summary"]["failed"] >= 1


def test_random_ids_are_seeded_and_sized():
    a = wl.random_requests(2, input_len=10, output_len=5, per_slot=2, seed=3)
    assert a == wl.random_requests(2, input_len=10, output_len=5, per_slot=2, seed=3)
    assert len(a) == 4 and all(len(r["payload"]["input_ids"]) == 10 for r in a)
    assert a != wl.random_requests(2, input_len=10, output_len=5, per_slot=2, seed=4)


def test_chatml_and_tool_turns():
    msgs = wl.agent_next(wl.agent_opening(1), '{"tool": "read_file"}', 1, 0)
    text = wl.chatml(msgs)
    assert text.startswith("<|im_start|>system\nYou are a coding agent") and text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\n<tool_response>\n{" in text and '"search_files"' in text


def test_percentiles_and_summary_match_numpy():
    vals = [0.5, 0.1, 0.9, 0.3, 0.7, 0.2]
    for q in (50, 90, 99):
        assert st.percentile(vals, q) == pytest.approx(float(np.percentile(vals, q)))
    assert st.percentile([], 50) is None
    reqs = [{"ok": True, "ttft": 0.1, "itl": [0.01, 0.02], "latency": 1.0, "completion_tokens": 100,
             "prompt_tokens": 50, "cached_tokens": 10, "spec_verify_ct": 25},
            {"ok": True, "ttft": 0.3, "itl": [0.03], "latency": 2.0, "completion_tokens": 60, "prompt_tokens": 50,
             "cached_tokens": 0, "spec_verify_ct": 20},
            {"ok": False, "error": "x"}, {"ok": False, "skipped": True}]
    s = st.summarize(reqs, 2.0)
    assert s["output_tok_s"] == 80.0 and s["accept_length"] == pytest.approx(160 / 45, abs=1e-3)
    assert (s["completed"], s["failed"], s["skipped"]) == (2, 1, 1) and s["cached_ratio"] == 0.1
    assert s["ttft_p50_ms"] == pytest.approx(200.0) and s["itl_p50_ms"] == pytest.approx(20.0)
    text = "# HELP x\nsglang:spec_accept_length{tp_rank=\"0\"} 3.5\nsglang:num_requests_total{a=\"b\"} 7.0\n"
    assert st.parse_prometheus(text) == {"sglang:spec_accept_length": 3.5, "sglang:num_requests_total": 7.0}
