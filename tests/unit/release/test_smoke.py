"""Smoke logic: fail-fast wait verdicts and timing, generation check, speculative proof.

HTTP checks run against a real local HTTP server that answers with SGLang's response shapes
(the chat completion body is the one from the seeds: content null, reasoning_content set).
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_release import smoke as s
from ansible.module_utils.dflash_release import target as rtarget
from ansible.module_utils.dflash_release import wait as rwait
from ansible.module_utils.dflash_service import systemd

# `systemctl show -p LoadState,ActiveState,SubState,Result,NRestarts,ExecMainPID,ExecMainStatus,
# ExecMainCode dflash-main.service` on systemd 252 (Debian 12) for a unit whose python exited 1
SHOW_FAILED = """LoadState=loaded
ActiveState=failed
SubState=failed
Result=exit-code
NRestarts=0
ExecMainPID=0
ExecMainStatus=1
ExecMainCode=1
"""


def test_parse_show_and_judge():
    sh = systemd.parse_show(SHOW_FAILED)
    assert sh["NRestarts"] == 0 and sh["ExecMainStatus"] == 1 and sh["ActiveState"] == "failed"
    assert rwait.judge(sh, None) == "failed"
    up = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    assert rwait.judge(up, 200) == "healthy"
    assert rwait.judge(up, 503) == "starting"
    assert rwait.judge(up, None) == "starting"
    assert rwait.judge(dict(up, NRestarts=1), 200) == "restarted"
    assert rwait.judge(dict(up, NRestarts=3), 200, baseline_restarts=3) == "healthy"
    assert rwait.judge({"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": 0}, None) == "restarted"
    assert rwait.judge({"ActiveState": "inactive", "SubState": "dead"}, None) == "exited"
    assert rwait.judge({"LoadState": "not-found", "ActiveState": "inactive"}, None) == "missing"


class FakeTime:
    def __init__(self):
        self.t = 0.0

    def clock(self):
        return self.t

    def sleep(self, d):
        self.t += d


def scripted(timeline):
    """show() from a [(from_time, state)] timeline per unit."""

    def pick(unit, t):
        cur = None
        for start, st in timeline[unit]:
            if t >= start:
                cur = st
        return cur

    return pick


def test_wait_fails_fast_on_crash_while_other_instance_still_starts():
    ft = FakeTime()
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    tl = {
        "dflash-a.service": [(0, running)],
        "dflash-b.service": [(0, running), (2.1, {"LoadState": "loaded", "ActiveState": "activating",
                                                  "SubState": "auto-restart", "NRestarts": 1})],
    }
    pick = scripted(tl)
    res = rwait.wait_units(
        [{"name": "a", "unit": "dflash-a.service", "health_url": "A"},
         {"name": "b", "unit": "dflash-b.service", "health_url": "B"}],
        show=lambda u: pick(u, ft.t), health=lambda url, to: None, timeout=600, interval=0.25,
        clock=ft.clock, sleep=ft.sleep,
    )
    assert res["verdict"] == "failed" and res["failed"] == ["b"]
    assert res["instances"]["b"]["verdict"] == "restarted"
    assert 2.1 <= res["seconds"] <= 2.35  # detected within one interval, not after 600 s
    assert res["instances"]["a"]["verdict"] == "starting"


def test_wait_healthy_lag_is_one_interval_and_timeout_reports_hang():
    ft = FakeTime()
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    inst = [{"name": "a", "unit": "u", "health_url": "A"}]
    res = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: 200 if ft.t >= 5.0 else None,
                       timeout=60, interval=0.25, clock=ft.clock, sleep=ft.sleep)
    assert res["verdict"] == "healthy" and 5.0 <= res["instances"]["a"]["seconds"] <= 5.25
    ft.t = 0.0
    res = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: None, timeout=3, interval=0.5,
                       clock=ft.clock, sleep=ft.sleep)
    assert res["verdict"] == "timeout" and res["failed"] == ["a"]
    assert 3.0 <= res["seconds"] < 3.6
    assert "hang" in rwait.describe_failure("a", res["instances"]["a"])


def test_describe_failure_carries_diagnosis():
    st = {"verdict": "failed", "seconds": 1.2, "show": systemd.parse_show(SHOW_FAILED), "health": None}
    msg = rwait.describe_failure("main", st, {"cause": "missing_module", "summary": "No module named 'soundfile'",
                                          "remedy": "add soundfile to the layer"})
    assert "instance main: the unit failed after 1.2 s" in msg
    assert "cause=missing_module" in msg and "remedy: add soundfile" in msg


def test_args_helpers():
    args = ["--model-path", "/m", "--host", "0.0.0.0", "--port", "30001", "--speculative-algorithm=ddtree"]
    # where an instance answers: its manifest entry's port and base_url (the flags fact's); an entry of a manifest
    # written before they were recorded is read from its args, in that one place
    assert instance_address({"port": 30002, "base_url": "http://10.0.0.1:30002", "args": args}) == (
        30002, "http://10.0.0.1:30002")
    assert instance_address({"args": args}) == (30001, "http://127.0.0.1:30001")
    assert instance_address({"args": ["--host", "::1", "--port", "1"]}) == (1, "http://[::1]:1")
    assert instance_address({"args": []}) == (None, "http://127.0.0.1:30000")  # sglang's default port
    assert s.base_url({"name": "a", "port": 5, "host": "::"}) == "http://127.0.0.1:5"
    assert s.base_url({"name": "a", "base_url": "http://h:1/", "port": 5}) == "http://h:1"
    assert s.base_url({"name": "a", "args": args}) == "http://127.0.0.1:30000"  # no port given: sglang's default
    with pytest.raises(s.SmokeError, match=r"instances\[2\] \(a\): port 'x' is not a number"):
        s.base_url({"name": "a", "port": "x"}, 2)
    assert s.expected_algorithm(args) == "DDTREE"
    assert s.expected_algorithm(["--port", "1"]) is None
    assert systemd.journal_argv("dflash-a.service", 1700000000.7)[:5] == [
        "journalctl", "-u", "dflash-a.service", "--since", "@1700000000"]


# ----------------------------------------------------------------------------- real HTTP


class Server:
    """A local HTTP server answering like SGLang; ``behaviour`` tweaks the answers."""

    def __init__(self, **behaviour):
        self.b = behaviour
        self.requests = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj):
                raw = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                outer.requests.append(("GET", self.path, None))
                if self.path == "/health":
                    self._send(outer.b.get("health", 200), {})
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "/dev/shm/Qwen3.6-27B"}]})
                elif self.path == "/get_server_info":
                    self._send(200, {"speculative_algorithm": outer.b.get("algo", "DFLASH"), "version": "0.5.11"})
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(("POST", self.path, body))
                if self.path == "/v1/chat/completions":
                    msg = {"role": "assistant", "content": None,
                           "reasoning_content": outer.b.get("reasoning", "Here's a thinking process:\n\n1.")}
                    self._send(200, {"id": "e10d", "object": "chat.completion", "model": body["model"],
                                     "choices": [{"index": 0, "message": msg, "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 20, "completion_tokens": 128,
                                               "total_tokens": 148}})
                elif self.path == "/generate":
                    mi = {"completion_tokens": 64, "spec_verify_ct": outer.b.get("verify", 16)}
                    if outer.b.get("accept", True):
                        mi["spec_accept_length"] = 4.0
                    out = {"text": "def fibonacci(n):", "meta_info": mi}
                    if "input_ids" in body:
                        out["output_ids"] = list(range(body["sampling_params"]["max_new_tokens"]))
                    self._send(200, out)
                else:
                    self._send(404, {"detail": "Not Found"})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(request):
    srv = Server(**getattr(request, "param", {}))
    yield srv
    srv.close()


ARGS = ["--model-path", "/dev/shm/Qwen3.6-27B", "--port", "30001", "--speculative-algorithm", "DFLASH"]


def test_smoke_passes_on_reasoning_content_and_proves_speculation(server):
    rec = s.smoke_instance(server.url, ARGS, timeout=5)
    assert rec["generation"]["returned"] == "reasoning_content"
    assert rec["generation"]["completion_tokens"] == 128 and rec["generation"]["tokens_per_s"] > 0
    assert rec["speculative"] == {"spec_verify_ct": 16, "spec_accept_length": 4.0, "completion_tokens": 64,
                                  "seconds": rec["speculative"]["seconds"]}
    chat = next(b for m, p, b in server.requests if p == "/v1/chat/completions")
    assert chat["temperature"] == 0 and chat["max_tokens"] == 128
    assert chat["messages"][0]["content"] == s.FIBONACCI_PROMPT
    assert chat["model"] == "/dev/shm/Qwen3.6-27B"


def test_wait_gives_sglangs_health_probe_more_than_a_second():
    # sglang 0.5.11 answers a healthy /health after its probe and a 1 s sleep: a client timeout of
    # 1 s never sees it (the 2026-12-02 H200 deploy waited 300 s beside a server that was ready)
    ft = FakeTime()
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    inst = [{"name": "a", "unit": "u", "health_url": "A"}]
    seen = []

    def sglang_health(url, to):
        seen.append(to)
        return 200 if to > 1.05 else None

    res = rwait.wait_units(inst, show=lambda u: running, health=sglang_health, timeout=60, interval=0.25,
                       clock=ft.clock, sleep=ft.sleep)
    assert res["verdict"] == "healthy" and seen[0] >= 2.0
    # at the end of a short chunk (the action plugin's, 1-20 s) the probe still gets 2 s
    seen.clear()
    ft.t = 0.0
    res = rwait.wait_units(inst, show=lambda u: running, health=sglang_health, timeout=0.5, clock=ft.clock,
                       sleep=ft.sleep)
    assert res["verdict"] == "healthy" and seen == [2.0]
    assert rwait.HEALTH_TIMEOUT >= 2.0 and rwait.health_status.__defaults__ == (rwait.HEALTH_TIMEOUT,)


def test_health_status_against_real_server(server):
    assert rwait.health_status(server.url + "/health") == 200
    assert rwait.health_status(server.url + "/nope") == 404
    assert rwait.health_status("http://127.0.0.1:9/health", 0.2) is None


@pytest.mark.parametrize(
    ("server", "match"),
    [
        ({"reasoning": ""}, "neither content nor reasoning_content"),
        ({"algo": None}, "names speculative_algorithm=None, expected DFLASH"),
        ({"verify": 0}, "no verify steps"),
        ({"accept": False, "verify": None}, "no verify steps"),
    ],
    indirect=["server"],
)
def test_smoke_failures_are_reported_with_partial_record(server, match):
    with pytest.raises(s.SmokeError, match=match) as ei:
        s.smoke_instance(server.url, ARGS, timeout=5)
    assert ei.value.record["error"]


def test_accept_length_computed_when_server_omits_it():
    out = s.check_spec_meta(200, {"meta_info": {"completion_tokens": 60, "spec_verify_ct": 20}}, 1.0)
    assert out["spec_accept_length"] == 3.0


def test_no_speculation_check_for_plain_instances(server):
    rec = s.smoke_instance(server.url, ["--port", "1"], timeout=5)
    assert "speculative" not in rec and rec["algorithm"] is None
    assert not [p for m, p, b in server.requests if p == "/generate"]


def test_skip_tokenizer_init_generates_from_ids(server):
    rec = s.smoke_instance(server.url, [*ARGS, "--skip-tokenizer-init"], timeout=5)
    assert rec["generation"]["via"].startswith("/generate input_ids")
    assert rec["generation"]["completion_tokens"] == 128
    gens = [b for m, p, b in server.requests if p == "/generate"]
    assert all("input_ids" in b for b in gens)


def test_unreachable_server_is_a_smoke_error():
    with pytest.raises(s.SmokeError, match="URLError|ConnectionRefused"):
        s.smoke_instance("http://127.0.0.1:9", ARGS, timeout=1)


def test_instances_from_manifest_and_records(tmp_path):
    # main: as this version records it (port and base_url from the flags fact); tree: a manifest of an older
    # version (args only), still readable
    m = {"id": "r1", "instances": {"main": {"unit": "dflash-main.service", "args": ["--port", "30001"],
                                            "port": 30001, "base_url": "http://10.1.2.3:30001"},
                                   "tree": {"args": ["--port", "30002"]}}}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    got = rtarget.load_manifest_instances(str(tmp_path))
    assert got == [{"name": "main", "unit": "dflash-main.service", "args": ["--port", "30001"], "port": 30001,
                    "base_url": "http://10.1.2.3:30001"},
                   {"name": "tree", "unit": "dflash-tree.service", "args": ["--port", "30002"], "port": 30002,
                    "base_url": "http://127.0.0.1:30002"}]
    assert [i["name"] for i in rtarget.instances_from_manifest(m, ["tree"])] == ["tree"]
    with pytest.raises(s.SmokeError, match="no instance nope"):
        rtarget.instances_from_manifest(m, ["nope"])
    s.merge_record(str(tmp_path / "smoke"), "main", "wait", {"verdict": "healthy"})
    s.merge_record(str(tmp_path / "smoke"), "main", "smoke", {"passed": True})
    assert json.loads((tmp_path / "smoke" / "main.json").read_text()) == {"wait": {"verdict": "healthy"}, "smoke": {"passed": True}}


def test_smoke_all_records_every_instance_and_names_failures(tmp_path, server):
    bad = Server(reasoning="")
    try:
        insts = [{"name": "good", "args": ARGS, "base_url": server.url},
                 {"name": "bad", "args": ARGS, "base_url": bad.url}]
        res, failed, msgs = s.smoke_all(insts, {"timeout": 5}, str(tmp_path), "ct200: ")
    finally:
        bad.close()
    assert failed == ["bad"] and res["good"]["passed"] and not res["bad"]["passed"]
    assert msgs == [f"ct200: instance bad: smoke failed: {res['bad']['error']}"]
    assert json.loads((tmp_path / "bad.json").read_text())["smoke"]["passed"] is False


def test_timeout_beside_a_server_that_says_ready_points_at_the_health_poll():
    st = {"verdict": "timeout", "seconds": 300.0, "health": None,
          "show": {"ActiveState": "active", "SubState": "running", "NRestarts": 0}}
    diag = {"cause": "unknown", "remedy": "nothing to fix from this log",
            "summary": "no failure found in x.log (83 lines; the server reported ready)"}
    msg = rwait.describe_failure("h200-dflash", st, diag)
    assert "hang" in msg and "the log says the server is up but /health gave no 200" in msg
    assert "/health gave no 200" not in rwait.describe_failure("a", st, {"cause": "cuda_oom", "summary": "OOM"})


def test_a_server_whose_log_says_ready_but_health_never_answers_fails_after_the_grace_not_the_timeout():
    ft = FakeTime()
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    inst = [{"name": "a", "unit": "u", "health_url": "http://10.9.9.9:30001/health"}]
    looks = []

    def ready(i):  # the log says "fired up" from t=100
        looks.append(ft.t)
        return ft.t >= 100

    res = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: None, timeout=600, interval=0.25,
                       clock=ft.clock, sleep=ft.sleep, logged_ready=ready)
    st = res["instances"]["a"]
    assert res["verdict"] == "failed" and st["verdict"] == "unanswered"
    assert 100 + rwait.READY_GRACE <= st["seconds"] <= 100 + rwait.READY_GRACE + rwait.READY_CHECK_EVERY + 0.5
    # the log is read every few seconds, not at every poll
    assert all(b - a >= rwait.READY_CHECK_EVERY for a, b in itertools.pairwise(looks))
    msg = rwait.describe_failure("a", st)
    assert "its log says it is up and ready, but /health gave no 200" in msg and "/health=None" in msg


def test_ready_grace_carries_over_chunks_and_a_late_200_still_passes():
    ft = FakeTime()
    running = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
    inst = [{"name": "a", "unit": "u", "health_url": "A"}]
    # chunk 1 (20 s): ready seen at once, no 200 -> still starting, ready_since handed on
    res = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: None, timeout=20, clock=ft.clock,
                       sleep=ft.sleep, logged_ready=lambda i: True)
    assert res["verdict"] == "timeout" and res["instances"]["a"]["ready_since"] == 0.0
    # chunk 2 from the handed-on ready time: fails once the grace is over, not 60 s into this chunk
    res2 = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: None, timeout=200, clock=ft.clock,
                        sleep=ft.sleep, logged_ready=lambda i: True, ready_since={"a": 0.0})
    assert res2["instances"]["a"]["verdict"] == "unanswered" and ft.t <= rwait.READY_GRACE + 1
    # a 200 inside the grace: healthy
    ft.t = 0.0
    res3 = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: 200 if ft.t >= 30 else None,
                        timeout=200, clock=ft.clock, sleep=ft.sleep, logged_ready=lambda i: True)
    assert res3["verdict"] == "healthy"
    # no log reader (or a log that never says ready): the old timeout verdict
    ft.t = 0.0
    res4 = rwait.wait_units(inst, show=lambda u: running, health=lambda url, to: None, timeout=90, clock=ft.clock,
                        sleep=ft.sleep, logged_ready=lambda i: False)
    assert res4["verdict"] == "timeout"


def test_says_ready_reads_sglangs_and_the_stand_ins_line():
    import pathlib

    from ansible.module_utils.dflash_release.startup import says_ready
    root = pathlib.Path(__file__).resolve().parents[3]
    text = (root / "tests/fixtures/logs/unknown/h200-openai-harmony-caught-then-ready.log").read_text()
    assert says_ready(text) and says_ready("x\nThe server is fired up and ready to roll! (lab stand-in: serving)\n")
    assert not says_ready(text.split("The server is fired up")[0]) and not says_ready("")


def test_secondary_rank_smoke_record():
    assert s.secondary_rank_record(["--port", "1"]) is None
    assert s.secondary_rank_record(["--node-rank", "0"]) is None
    rec = s.secondary_rank_record(["--nnodes", "2", "--node-rank=1"])
    assert rec["passed"] and rec["node_rank"] == 1 and rec["generation"]["completion_tokens"] == 0
    assert "health only" in rec["generation"]["via"]
