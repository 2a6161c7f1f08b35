"""The lab stand-in server: flags, every endpoint with sglang 0.5.11's shapes, every fault."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from ansible.module_utils.dflash_diagnose.rules import CAUSES

ROOT = Path(__file__).resolve().parents[3]
STANDIN = ROOT / "files" / "lab" / "sglang_standin.py"
FAULTS = ROOT / "files" / "lab" / "faults"
FIB = "Write a Python function fibonacci(n) using iteration. Return only code."
BASE_ARGS = ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--tp-size", "1",
             "--attention-backend", "triton"]
SPEC_ARGS = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/dev/shm/draft",
             "--speculative-num-draft-tokens", "16"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_standin(*flags, env=None, tries=200):
    """The stand-in as a process on a free loopback port (--enable-metrics and ``flags``), once /health answers:
    (process, base URL). Used by the bench tests too."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--model-path", "/m", "--host", "127.0.0.1", "--port",
                             str(port), "--enable-metrics", *flags], stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(tries):
        try:
            if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("stand-in did not start")


def http(method, url, body=None, timeout=5.0, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, raw, resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def jget(url):
    status, raw, _ = http("GET", url)
    return status, json.loads(raw) if raw else None


def jpost(url, body):
    status, raw, _ = http("POST", url, body)
    return status, json.loads(raw) if raw else None


class Server:
    def __init__(self, args, env=None, flags_file=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_STANDIN")}
        full_env.update(env or {})
        full_env["DFLASH_STANDIN_FLAGS_FILE"] = flags_file or "/nonexistent/flags.txt"
        self.proc = subprocess.Popen(
            [sys.executable, str(STANDIN), *args, "--port", str(self.port)],
            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def wait_listening(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"stand-in exited {self.proc.returncode}: {self.proc.stderr.read()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("stand-in did not listen")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _, err = self.proc.communicate()
        return self.proc.returncode, err


@pytest.fixture
def start():
    servers = []

    def _start(args, env=None, flags_file=None, wait=True):
        srv = Server(args, env, flags_file)
        servers.append(srv)
        if wait:
            srv.wait_listening()
        return srv

    yield _start
    for srv in servers:
        srv.stop()


@pytest.fixture(scope="module")
def spec_server():
    srv = Server([*BASE_ARGS, *SPEC_ARGS, "--reasoning-parser", "qwen3", "--served-model-name", "qwen",
                  "--enable-metrics"])
    srv.wait_listening()
    yield srv
    srv.stop()


def run_once(args, env=None, flags_file=None, timeout=20):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_STANDIN")}
    full_env.update(env or {})
    full_env["DFLASH_STANDIN_FLAGS_FILE"] = flags_file or "/nonexistent/flags.txt"
    return subprocess.run([sys.executable, str(STANDIN), *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)


# --------------------------------------------------------------------------- endpoints


def test_health_and_banner(spec_server):
    t0 = time.monotonic()
    status, raw, _ = http("GET", spec_server.base + "/health")
    assert status == 200 and raw == b""
    # like sglang's one-token probe (a 1 s sleep before it looks): a healthy /health takes >= 1 s
    assert time.monotonic() - t0 >= 1.0
    t0 = time.monotonic()
    assert http("GET", spec_server.base + "/ping")[0] == 200 and time.monotonic() - t0 < 1.0
    status, raw, _ = http("GET", spec_server.base + "/health_generate")
    assert status == 200


def test_v1_models(spec_server):
    status, body = jget(spec_server.base + "/v1/models")
    assert status == 200
    assert body["object"] == "list"
    card = body["data"][0]
    assert card["id"] == "qwen" and card["object"] == "model" and card["owned_by"] == "sglang"
    assert card["root"] == "qwen" and card["max_model_len"] > 0
    assert jget(spec_server.base + "/v1/models/qwen")[0] == 200
    status, err = jget(spec_server.base + "/v1/models/nope")
    assert status == 404 and err["error"]["code"] == "model_not_found"


def test_server_info_is_loud_and_has_server_args(spec_server):
    status, info = jget(spec_server.base + "/get_server_info")
    assert status == 200
    assert info["stand_in"].startswith("dflash-deploy lab stand-in")
    assert info["version"] == "0.5.11"
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_draft_model_path"] == "/dev/shm/draft"
    assert info["speculative_num_draft_tokens"] == 16
    assert info["tp_size"] == 1 and info["attention_backend"] == "triton"
    assert info["model_path"] == "/dev/shm/Qwen3.6-27B" and info["served_model_name"] == "qwen"
    assert info["port"] == spec_server.port and info["host"] == "127.0.0.1"
    assert isinstance(info["internal_states"], list)
    assert jget(spec_server.base + "/server_info")[1]["stand_in"].startswith("dflash-deploy lab stand-in")
    assert jget(spec_server.base + "/model_info")[1]["model_path"] == "/dev/shm/Qwen3.6-27B"


def test_chat_completion_shape_and_determinism(spec_server):
    body = {"model": "qwen", "messages": [{"role": "user", "content": FIB}], "temperature": 0, "max_tokens": 128}
    s1, r1 = jpost(spec_server.base + "/v1/chat/completions", body)
    s2, r2 = jpost(spec_server.base + "/v1/chat/completions", body)
    assert s1 == s2 == 200
    assert r1["object"] == "chat.completion" and r1["model"] == "qwen"
    msg = r1["choices"][0]["message"]
    assert msg["role"] == "assistant"
    assert msg["reasoning_content"].startswith("Here's a thinking process")
    assert r1["usage"]["completion_tokens"] == 128
    assert r1["usage"]["total_tokens"] == r1["usage"]["prompt_tokens"] + 128
    assert r1["choices"][0]["finish_reason"] == "length"
    assert r1["choices"][0]["message"] == r2["choices"][0]["message"]  # temperature 0: identical


def test_chat_honours_max_tokens_and_finishes_with_code(spec_server):
    url = spec_server.base + "/v1/chat/completions"
    short = jpost(url, {"messages": [{"role": "user", "content": FIB}], "temperature": 0, "max_tokens": 5})[1]
    assert short["usage"]["completion_tokens"] == 5
    full = jpost(url, {"messages": [{"role": "user", "content": FIB}], "temperature": 0, "max_tokens": 2000})[1]
    assert full["choices"][0]["finish_reason"] == "stop"
    assert "def fibonacci(n):" in full["choices"][0]["message"]["content"]
    assert full["usage"]["completion_tokens"] < 2000


def test_chat_temperature_varies_but_is_seeded(spec_server):
    url = spec_server.base + "/v1/chat/completions"

    def ask(temp, seed):
        body = {"messages": [{"role": "user", "content": FIB}], "temperature": temp, "max_tokens": 400,
                "seed": seed}
        return jpost(url, body)[1]["choices"][0]["message"]

    assert ask(0.9, 1) == ask(0.9, 1)
    assert ask(0.9, 1) != ask(0, 1)
    assert ask(0.9, 1) != ask(0.9, 2)


def test_chat_stream(spec_server):
    body = {"messages": [{"role": "user", "content": FIB}], "temperature": 0, "max_tokens": 10, "stream": True}
    status, raw, headers = http("POST", spec_server.base + "/v1/chat/completions", body)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = [ln[6:] for ln in raw.decode().splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 11 and chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_generate_text_with_spec_meta(spec_server):
    status, out = jpost(spec_server.base + "/generate",
                        {"text": FIB, "sampling_params": {"temperature": 0, "max_new_tokens": 64}})
    assert status == 200
    mi = out["meta_info"]
    assert mi["completion_tokens"] == 64 == len(out["output_ids"])
    assert mi["finish_reason"] == {"type": "length", "length": 64}
    assert mi["spec_verify_ct"] > 0
    assert mi["spec_accept_length"] == pytest.approx(64 / mi["spec_verify_ct"])
    assert mi["spec_accepted_drafts"] == 64 - mi["spec_verify_ct"]
    assert mi["spec_proposed_drafts"] == mi["spec_verify_ct"] * 15
    assert mi["spec_accept_rate"] == pytest.approx(mi["spec_accepted_drafts"] / mi["spec_proposed_drafts"])
    assert sum(mi["spec_accept_histogram"]) == mi["spec_verify_ct"]
    again = jpost(spec_server.base + "/generate",
                  {"text": FIB, "sampling_params": {"temperature": 0, "max_new_tokens": 64}})[1]
    assert again["output_ids"] == out["output_ids"]
    assert again["meta_info"]["spec_verify_ct"] == mi["spec_verify_ct"]


def test_generate_input_ids_and_batch(spec_server):
    status, out = jpost(spec_server.base + "/generate",
                        {"input_ids": [1, 2, 3], "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
    assert status == 200 and out["meta_info"]["prompt_tokens"] == 3 and len(out["output_ids"]) == 8
    status, outs = jpost(spec_server.base + "/generate", [{"input_ids": [1], "sampling_params": {}},
                                                          {"text": "x", "sampling_params": {}}])
    assert status == 200 and len(outs) == 2
    assert jpost(spec_server.base + "/generate", {"sampling_params": {}})[0] == 400


def test_metrics(spec_server):
    jpost(spec_server.base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 32}})
    status, raw, headers = http("GET", spec_server.base + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    text = raw.decode()
    for name in ("sglang:num_running_reqs", "sglang:gen_throughput", "sglang:spec_accept_length",
                 "sglang:spec_accept_rate", "sglang:prompt_tokens_total", "sglang:generation_tokens_total"):
        assert f"# TYPE {name} " in text
    line = next(ln for ln in text.splitlines() if ln.startswith("sglang:spec_accept_length{"))
    assert 'model_name="qwen"' in line and float(line.rsplit(" ", 1)[1]) > 1.0


def test_no_spec_fields_without_algorithm(start):
    srv = start(BASE_ARGS)
    out = jpost(srv.base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 16}})[1]
    assert "spec_verify_ct" not in out["meta_info"]
    assert jget(srv.base + "/get_server_info")[1]["speculative_algorithm"] is None


def test_skip_tokenizer_init_needs_input_ids(start):
    srv = start([*BASE_ARGS, "--skip-tokenizer-init"])
    assert jpost(srv.base + "/generate", {"text": "x", "sampling_params": {}})[0] == 400
    out = jpost(srv.base + "/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 4}})[1]
    assert out["text"] == "" and len(out["output_ids"]) == 4


def test_first_log_line_is_the_banner(start):
    srv = start(BASE_ARGS)
    _, err = srv.stop()
    first = err.splitlines()[0]
    assert "LAB STAND-IN" in first and "NOT SGLang" in first
    assert "permissive parse" in err  # no flags file given
    assert diagnose_text(err)["cause"] == "unknown"


# --------------------------------------------------------------------------- flags


def test_unknown_flag_rejected_like_argparse(tmp_path):
    flags = tmp_path / "flags.txt"
    known = ("--model-path", "--model", "--host", "--port", "--tp-size", "--tensor-parallel-size",
             "--attention-backend", "--speculative-algorithm", "--speculative-draft-model-path",
             "--speculative-num-draft-tokens", "--speculative-ddtree-budget", "--disable-cuda-graph")
    flags.write_text("".join(f"{flag}\n" for flag in known))
    res = run_once([*BASE_ARGS, "--port", "1", "--bogus-flag", "3"], flags_file=str(flags))
    assert res.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --bogus-flag 3" in res.stderr
    assert "usage: sglang serve" in res.stderr
    # known flags, booleans and the DDTree flags parse fine
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(STANDIN), *BASE_ARGS, "--disable-cuda-graph",
                             "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "15",
                             "--speculative-draft-model-path", "/d", "--port", str(port)],
                            env={**os.environ, "DFLASH_STANDIN_FLAGS_FILE": str(flags)},
                            stderr=subprocess.PIPE, text=True)
    try:
        srv_ok = False
        for _ in range(100):
            try:
                status, info = jget(f"http://127.0.0.1:{port}/get_server_info")
                srv_ok = status == 200
                break
            except OSError:
                time.sleep(0.05)
        assert srv_ok
        assert info["speculative_algorithm"] == "DDTREE" and info["speculative_ddtree_budget"] == 15
        assert info["disable_cuda_graph"] is True and info["lab_standin_flags_file"] == str(flags)
        out = jpost(f"http://127.0.0.1:{port}/generate", {"text": "x", "sampling_params": {"max_new_tokens": 20}})[1]
        assert out["meta_info"]["spec_proposed_drafts"] == out["meta_info"]["spec_verify_ct"] * 15
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def test_bad_algorithm_and_missing_model(tmp_path):
    res = run_once(["--model-path", "/m", "--speculative-algorithm", "MEDUSA"])
    assert res.returncode == 2 and "invalid choice: 'MEDUSA'" in res.stderr
    res = run_once(["--port", "1234"])
    assert res.returncode == 2 and "required: --model-path" in res.stderr


def test_repo_flags_file_is_used_when_present():
    flags = ROOT / "files" / "patches" / "sglang" / "0.5.11" / "server-flags.txt"
    if not flags.exists():
        pytest.skip("files/patches/sglang/0.5.11/server-flags.txt not generated yet")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DFLASH_STANDIN")}
    res = subprocess.run([sys.executable, str(STANDIN), "--model-path", "/m", "--no-such-flag-x"], env=env,
                         capture_output=True, text=True, timeout=20, check=False)
    assert res.returncode == 2 and "unrecognized arguments: --no-such-flag-x" in res.stderr
    assert "flags of sglang 0.5.11" in res.stderr


# --------------------------------------------------------------------------- faults


@pytest.mark.parametrize("cause", [c for c in CAUSES if c != "unknown"])
def test_crash_fault_for_every_cause_is_diagnosed(cause):
    assert (FAULTS / f"{cause}.log").is_file()
    t0 = time.monotonic()
    res = run_once(BASE_ARGS, env={"DFLASH_STANDIN_FAULT": "crash", "DFLASH_STANDIN_FAULT_LOG": cause})
    assert res.returncode == 1
    assert "LAB STAND-IN" in res.stderr.splitlines()[0]
    assert time.monotonic() - t0 < 10
    assert diagnose_text(res.stderr)["cause"] == cause


def test_crash_fault_from_file_with_delay(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    t0 = time.monotonic()
    res = run_once(BASE_ARGS, env={"DFLASH_STANDIN_FAULT": "crash", "DFLASH_STANDIN_FAULT_LOG": str(log),
                                   "DFLASH_STANDIN_FAULT_DELAY": "0.5"})
    assert res.returncode == 1 and time.monotonic() - t0 >= 0.5
    assert "no kernel image" in res.stderr


def test_slow_fault(start):
    srv = start(BASE_ARGS, env={"DFLASH_STANDIN_FAULT": "slow", "DFLASH_STANDIN_START_DELAY": "1.5"})
    t0 = time.monotonic()
    assert http("GET", srv.base + "/health")[0] == 503
    assert jpost(srv.base + "/generate", {"text": "x"})[0] == 503
    while http("GET", srv.base + "/health")[0] != 200:
        assert time.monotonic() - t0 < 5
        time.sleep(0.1)
    assert time.monotonic() - t0 >= 1.0


def test_hang_fault(start):
    srv = start(BASE_ARGS, env={"DFLASH_STANDIN_FAULT": "hang"})
    for _ in range(5):
        assert http("GET", srv.base + "/health")[0] == 503
        time.sleep(0.2)
    assert srv.proc.poll() is None


def test_wrong_fault(start):
    srv = start([*BASE_ARGS, *SPEC_ARGS, "--reasoning-parser", "qwen3"], env={"DFLASH_STANDIN_FAULT": "wrong"})
    assert http("GET", srv.base + "/health")[0] == 200
    chat = jpost(srv.base + "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": FIB}], "temperature": 0, "max_tokens": 128})[1]
    msg = chat["choices"][0]["message"]
    assert not msg["content"] and not msg["reasoning_content"]
    out = jpost(srv.base + "/generate", {"text": FIB, "sampling_params": {"max_new_tokens": 32}})[1]
    assert not any(k.startswith("spec_") for k in out["meta_info"])
    assert jget(srv.base + "/get_server_info")[1]["speculative_algorithm"] is None


def test_port_in_use_reported_like_uvicorn(start):
    srv = start(BASE_ARGS)
    res = run_once([*BASE_ARGS, "--port", str(srv.port)])
    assert res.returncode == 1
    r = diagnose_text(res.stderr)
    assert r["cause"] == "port_in_use" and str(srv.port) in r["summary"]


def test_sigterm_stops_cleanly(start):
    srv = start(BASE_ARGS)
    rc, _ = srv.stop()
    assert rc == 0


REAL_FLAGS = ROOT / "files" / "patches" / "sglang" / "0.5.11" / "server-flags.txt"


@pytest.mark.skipif(not REAL_FLAGS.exists(), reason="flags file not generated")
def test_real_flags_file_kinds():
    # the rendered shape of a ct200 DDTREE instance with the SM 12.x fallbacks, plus a few extras
    args = ["--model-path", "/dev/shm/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "1", "--tp", "1",
            "--mem-fraction-static", "0.85", "--context-length", "8192", "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", "/dev/shm/Qwen3.6-27B-DFlash", "--speculative-ddtree-budget", "15",
            "--speculative-ddtree-topk", "8", "--speculative-ddtree-mode", "tree", "--attention-backend",
            "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none", "--disable-cuda-graph",
            "--random-seed", "-1", "--cuda-graph-bs", "1", "2", "4"]
    env = {"DFLASH_STANDIN_FLAGS_FILE": str(REAL_FLAGS)}
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import sglang_standin as s; "
            "known, _ = s.load_known_flags(); print(json.dumps(s.parse_args(sys.argv[2:], known)))")
    res = subprocess.run([sys.executable, "-c", code, str(STANDIN.parent), *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=20, check=False)
    assert res.returncode == 0, res.stderr
    parsed = json.loads(res.stdout)
    assert parsed["tp_size"] == 1  # --tp: unique prefix of --tp-size, dest tensor_parallel_size -> tp_size
    assert parsed["speculative_ddtree_budget"] == 15 and parsed["speculative_ddtree_mode"] == "tree"
    assert parsed["disable_cuda_graph"] is True and parsed["random_seed"] == -1
    assert parsed["cuda_graph_bs"] == [1, 2, 4]
    # a switch takes no value: the stray token is unrecognized, as with argparse
    bad = run_once(["--model-path", "/m", "--disable-cuda-graph", "yes"], flags_file=str(REAL_FLAGS))
    assert bad.returncode == 2 and "unrecognized arguments: yes" in bad.stderr
    # a value flag without its value
    bad = run_once(["--model-path", "/m", "--context-length"], flags_file=str(REAL_FLAGS))
    assert bad.returncode == 2 and "argument --context-length: expected one argument" in bad.stderr


def test_hang_fault_logs_a_start_up_that_stops_in_a_stage(start):
    # a crash fault's log left in the environment is not the hang's (molecule sets both in turn)
    srv = start(BASE_ARGS, env={"DFLASH_STANDIN_FAULT": "hang", "DFLASH_STANDIN_FAULT_LOG": "kernel_abi"})
    assert http("GET", srv.base + "/health")[0] == 503
    srv.proc.terminate()
    err = srv.proc.communicate(timeout=10)[1]
    r = diagnose_text(err, silent_seconds=30)
    assert (r["cause"], r["stage"]) == ("startup_hang", "nccl"), r["summary"]
    assert "Uvicorn running" not in err and "GET /health" not in err
