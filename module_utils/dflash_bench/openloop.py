"""tune.yml's load generator: open loop (Poisson arrivals at a request rate) and closed loop (concurrency).

Runs on the host against loopback, stdlib only, with the benchmark client's streamed ``/generate``
(``client.stream_generate``: TTFT, inter-token latencies split over the tokens of each chunk, and the
server's own ``meta_info``: verify steps, accept length, the per-step histogram where the server keeps
one). Why not a maintained load generator (sglang.bench_serving has ``--request-rate`` with Poisson
arrivals): it reports the accept length only as the server-wide average of ``/get_server_info``, not per
request, and imports torch, transformers and sglang's runtime, so it runs neither in the lab (no torch,
the stand-in server) nor without 5-10 s of imports per invocation; guidellm and aiperf speak only the
OpenAI API (no ``meta_info``). The definitions follow sglang.bench_serving: inter-arrival times drawn
from an exponential distribution of mean 1 / rate (its ``np.random.exponential(1.0 / request_rate)``),
the cell's duration from the first request sent to the last one done, ITL per streamed token.

Open loop: request i is sent at its arrival time whatever the server does (a thread each); the schedule
is seeded, so every configuration of a round gets the same arrivals. Closed loop: ``concurrency``
workers, each sending its next request when its last one finished. No request starts after the cell's
deadline; a request's socket timeout is the time left. No Ansible import.
"""

from __future__ import annotations

import random
import threading
import time

from ansible.module_utils.dflash_bench import client as cl

MAX_INFLIGHT = 1024  # open loop: requests in flight at once before the generator refuses more (host safety)


def arrivals(rate, n, seed) -> list:
    """The send offsets (s) of ``n`` Poisson arrivals at ``rate`` requests/s, the first at 0."""
    rng = random.Random(f"dflash-tune-arrivals|{seed}|{rate}|{n}")
    out, t = [], 0.0
    for _ in range(int(n)):
        out.append(t)
        t += rng.expovariate(float(rate))
    return out


def _slim(rec, sent_at=None, digits=6):
    """A request record without its text, latencies rounded to the microsecond (records stay small)."""
    rec.pop("text", None)
    for key in ("ttft", "latency"):
        if isinstance(rec.get(key), float):
            rec[key] = round(rec[key], digits)
    rec["itl"] = [round(x, digits) for x in rec.get("itl") or []]
    if sent_at is not None:
        rec["sent_at"] = round(sent_at, digits)
    return rec


def run_open(base_url, prompts, rate, n, seed, timeout, headers=None, clock=time.monotonic, sleep=time.sleep,
             max_inflight=MAX_INFLIGHT) -> dict:
    """``n`` requests (the prompts in turn) at Poisson arrivals of ``rate``/s. -> {requests, wall_s, offered_s}
    (offered_s: the schedule's span; wall_s: first send to last done)."""
    schedule = arrivals(rate, n, seed)
    results, lock, threads = [], threading.Lock(), []
    t0 = clock()
    deadline = t0 + float(timeout)
    inflight = [0]

    def one(i, at):
        item = prompts[i % len(prompts)]
        with lock:
            inflight[0] += 1
        try:
            rec = cl.stream_generate(base_url, item["payload"], max(0.5, deadline - clock()), headers=headers,
                                     left=lambda: deadline - clock())
        finally:
            with lock:
                inflight[0] -= 1
        rec.update(label=item["label"], index=i)
        with lock:
            results.append(_slim(rec, at))

    for i, at in enumerate(schedule):
        wait = t0 + at - clock()
        if wait > 0:
            sleep(wait)
        item = prompts[i % len(prompts)]
        if clock() >= deadline:
            results.append({"ok": False, "skipped": True, "error": "cell time limit", "label": item["label"],
                            "index": i})
            continue
        if inflight[0] >= max_inflight:
            results.append({"ok": False, "error": f"not sent: {max_inflight} requests in flight (the generator's "
                                                  "limit; the server is far past saturation)",
                            "label": item["label"], "index": i, "sent_at": round(at, 6)})
            continue
        th = threading.Thread(target=one, args=(i, at), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join(max(0.0, deadline - clock()) + 5.0)
    done = [t0 + r["sent_at"] + r["latency"] for r in results if r.get("latency") is not None and "sent_at" in r]
    wall = (max(done) - t0) if done else clock() - t0
    with lock:
        out = sorted(results, key=lambda r: r["index"])
    return {"requests": out, "wall_s": round(wall, 6), "offered_s": round(schedule[-1], 6) if schedule else 0.0,
            "alive": sum(th.is_alive() for th in threads)}


def run_closed(base_url, prompts, concurrency, n, timeout, headers=None, clock=time.monotonic) -> dict:
    """``n`` requests (the prompts in turn) over ``concurrency`` closed-loop workers. -> {requests, wall_s}."""
    results, lock = [], threading.Lock()
    t0 = clock()
    deadline = t0 + float(timeout)
    counter = [0]

    def worker(w):
        while True:
            with lock:
                i = counter[0]
                counter[0] += 1
            if i >= n:
                return
            item = prompts[i % len(prompts)]
            if clock() >= deadline:
                with lock:
                    results.append({"ok": False, "skipped": True, "error": "cell time limit", "label": item["label"],
                                    "index": i, "worker": w})
                continue
            at = clock() - t0
            rec = cl.stream_generate(base_url, item["payload"], max(0.5, deadline - clock()), headers=headers,
                                     left=lambda: deadline - clock())
            rec.update(label=item["label"], index=i, worker=w)
            with lock:
                results.append(_slim(rec, at))

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(int(concurrency))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.0, deadline - clock()) + 5.0)
    wall = clock() - t0
    with lock:
        out = sorted(results, key=lambda r: r["index"])
    return {"requests": out, "wall_s": round(wall, 6), "alive": sum(th.is_alive() for th in threads)}


def run_load(base_url, prompts, load, seed=0, timeout=120.0, api_key=None) -> dict:
    """One cell: ``load`` = {kind: rate|concurrency, value, requests}. -> {status, requests, wall_s,
    server_before, server_after, seconds, errors}."""
    hdr = cl.auth_headers(api_key)
    t_begin = time.monotonic()
    before = cl.server_readings(base_url)
    if load["kind"] == "rate":
        got = run_open(base_url, prompts, float(load["value"]), int(load["requests"]), seed, timeout, hdr)
    else:
        got = run_closed(base_url, prompts, int(load["value"]), int(load["requests"]), timeout, hdr)
    after = cl.server_readings(base_url)
    reqs = got["requests"]
    ok = [r for r in reqs if r.get("ok")]
    if not ok:
        status = "failed"
    elif len(ok) < len(reqs) or got.get("alive"):
        status = "partial"
    else:
        status = "ok"
    errors = sorted({r["error"] for r in reqs if r.get("error")})
    return {"status": status, "requests": reqs, "wall_s": got["wall_s"], "offered_s": got.get("offered_s"),
            "server_before": before, "server_after": after, "seconds": round(time.monotonic() - t_begin, 3),
            "errors": errors[:5]}


def warm_up(base_url, api_key=None, timeout=60.0) -> dict:
    """One short request (a server's first request pays for lazy initialisations)."""
    rec = cl.stream_generate(base_url, {"text": "Hello", "sampling_params": {"temperature": 0, "max_new_tokens": 8}},
                             timeout, headers=cl.auth_headers(api_key))
    return {k: rec.get(k) for k in ("ok", "error", "completion_tokens")}
