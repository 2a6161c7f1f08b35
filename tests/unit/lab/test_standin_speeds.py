"""The lab stand-in's known speeds (DFLASH_STANDIN_SPEEDS, tune.yml's Molecule scenario): the profile of the
server's own flags (the most specific key), the acceptance it reports and streams, the per-request speed
with noise, and the slots that make a queue (TTFT grows) when more requests come than it decodes at once."""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest
from test_standin import BASE_ARGS, STANDIN, Server, run_once

sys.path.insert(0, str(STANDIN.parent))
import sglang_standin as si

DD = ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "/d"]
SPEEDS = {"NONE": {"tok_s": 400}, "DFLASH": {"tok_s": 300, "accept": 3}, "DDTREE": {"tok_s": 500, "accept": 2},
          "DDTREE/15/8": {"tok_s": 800, "accept": 6}, "DDTREE/15/8@flashinfer": {"tok_s": 900, "accept": 6},
          "noise": 0.02, "slots": 2}


def test_profile_lookup_is_most_specific_first():
    text = json.dumps(SPEEDS)
    args = {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 15, "speculative_ddtree_topk": 8,
            "attention_backend": "triton"}
    assert si.speed_profile(args, text) == {"tok_s": 800.0, "accept": 6.0, "noise": 0.02, "slots": 2}
    assert si.speed_profile(dict(args, attention_backend="flashinfer"), text)["tok_s"] == 900.0
    assert si.speed_profile(dict(args, speculative_ddtree_budget=7), text)["tok_s"] == 500.0  # DDTREE
    assert si.speed_profile({}, text) == {"tok_s": 400.0, "accept": None, "noise": 0.02, "slots": 2}
    assert si.speed_profile({"speculative_algorithm": "EAGLE"}, text) is None
    assert si.speed_profile({}, None) is None


def test_accept_mean_over_the_steps():
    for accept in (1.0, 2.5, 6.0):
        steps = si.spec_steps(16, 4000, f"x{accept}", accept=accept)
        assert 4000 / len(steps) == pytest.approx(accept, rel=0.05)
    assert set(si.spec_steps(16, 200, "y", accept=1.0)) == {0}  # every draft rejected: one token a step


def stream(base, n=32):
    """Streamed /generate: (TTFT s, wall s, chunks, meta of the last chunk)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=30)
    t0 = time.monotonic()
    conn.request("POST", "/generate", json.dumps({"input_ids": list(range(1000, 1016)), "stream": True,
                                                  "sampling_params": {"max_new_tokens": n, "temperature": 0,
                                                                      "ignore_eos": True}}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    ttft, chunks, meta = None, 0, {}
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        chunks += 1
        ttft = ttft if ttft is not None else time.monotonic() - t0
        meta = json.loads(line[5:])["meta_info"]
    return ttft, time.monotonic() - t0, chunks, meta


@pytest.fixture(scope="module")
def fast_and_slow():
    env = {"DFLASH_STANDIN_SPEEDS": json.dumps(SPEEDS), "DFLASH_STANDIN_HEALTH_DELAY": "0"}
    servers = [Server([*BASE_ARGS, *DD, "--speculative-ddtree-budget", "15", "--speculative-ddtree-topk", "8"], env),
               Server([*BASE_ARGS, "--enable-metrics"], env)]
    for s in servers:
        s.wait_listening()
    yield servers
    for s in servers:
        s.stop()


def paced_at(wall: float, tokens: int, tok_s: float) -> bool:
    """A stream of `tokens` at `tok_s` (2% noise) takes at least its decode time (sleeps never end early)
    and not many times more: the upper bound leaves room for a loaded machine's scheduling (the unit tests
    run beside Molecule in CI), the lower bound is the profile's pacing itself."""
    need = tokens / tok_s
    return 0.9 * need <= wall <= 4 * need + 0.5


def test_streamed_speed_and_acceptance_follow_the_profile(fast_and_slow):
    dd, none = fast_and_slow
    _, wall, chunks, meta = stream(dd.base, 120)
    assert meta["completion_tokens"] == 120 and chunks == meta["spec_verify_ct"]
    assert meta["spec_accept_length"] == pytest.approx(6, rel=0.25)
    assert sum(meta["spec_accept_histogram"]) == meta["spec_verify_ct"]
    assert paced_at(wall, 120, 800), wall  # DDTREE/15/8: 800 tok/s
    _, wall, chunks, meta = stream(none.base, 40)
    assert chunks == 40 and "spec_verify_ct" not in meta
    assert paced_at(wall, 40, 400), wall  # NONE: 400 tok/s


def queue_gauge(base) -> float:
    import urllib.request

    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sglang:num_queue_reqs{"))


def test_requests_past_the_slots_wait(fast_and_slow):
    _, none = fast_and_slow
    out, seen = [], set()
    threads = [threading.Thread(target=lambda: out.append(stream(none.base, 200))) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        seen.add(queue_gauge(none.base))  # the server's own queue gauge, as sglang's /metrics has it
        time.sleep(0.02)
    for t in threads:
        t.join(30)
    ttfts = sorted(o[0] for o in out)
    # 2 slots: two start at once, two wait in the queue for a request to end (200 tokens at 400 tok/s: 0.5 s)
    assert len(out) == 4 and 2.0 in seen and max(seen) == 2.0, seen
    assert ttfts[2] > 0.25 and ttfts[3] > 0.25, ttfts
    assert queue_gauge(none.base) == 0.0


def test_a_bad_profile_stops_the_server_with_the_reason():
    res = run_once([*BASE_ARGS, "--port", "1"], env={"DFLASH_STANDIN_SPEEDS": "{not json"})
    assert res.returncode != 0 and "DFLASH_STANDIN_SPEEDS is not a JSON object of speeds" in res.stderr
