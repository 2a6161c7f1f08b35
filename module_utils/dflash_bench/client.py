"""Run one benchmark cell against a server: streamed /generate requests, closed loop, bounded.

``concurrency`` workers each send their next request as soon as the previous one finished (the
agentic workload: one session per worker, its turns in order). Nothing starts after the cell's
deadline; each request's socket timeout is the time left. Before the cell: one short warm-up
request; around it: the server's /metrics and /get_server_info (acceptance from the server itself,
and whether it says it is a stand-in, not sglang). Stdlib only: it runs on the GPU host with any Python >= 3.9.
No Ansible import.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse

from ansible.module_utils.dflash_bench import workloads as wl
from ansible.module_utils.dflash_bench.stats import parse_prometheus, summarize
from ansible.module_utils.dflash_common.sglang import accepted_drafts, proposed_drafts
from ansible.module_utils.dflash_release.smoke import SmokeError, http_json

SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_accept_histogram")


def auth_headers(api_key=None) -> dict:
    """The server's --api-key as sglang expects it (a Bearer token), when it has one."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def stream_generate(base_url, payload, timeout, clock=time.perf_counter, headers=None, left=None) -> dict:
    """POST /generate with stream; -> {ok, ttft, itl, latency, completion_tokens, prompt_tokens,
    cached_tokens, chunks, chunk_tokens, spec_*, finish_reason, text, error}. ``chunk_tokens[k]``: the chunks that
    brought k tokens (about one verify step each; sglang merges steps a slow reader did not take). ``left()``: seconds left to the cell's end;
    at 0 the stream is abandoned mid-way (the request counts as failed: "cell time limit")."""
    u = urllib.parse.urlsplit(base_url)
    body = json.dumps(dict(payload, stream=True)).encode()
    rec = {"ok": False, "ttft": None, "itl": [], "chunks": 0, "chunk_tokens": [], "completion_tokens": 0}
    t0 = clock()
    last_t, last_n, meta, text = t0, 0, {}, ""
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=max(0.5, float(timeout)))
    try:
        conn.request("POST", "/generate", body, {"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read(400).decode('utf-8', 'replace')}"
            return rec
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            if left is not None and left() <= 0:
                rec["error"] = "cell time limit (stopped mid-stream)"
                break
            chunk = json.loads(data)
            now = clock()
            meta = chunk.get("meta_info") or meta
            n = int(meta.get("completion_tokens") or 0)
            text = chunk.get("text", text)
            rec["chunks"] += 1
            if n > last_n:
                grow = n - last_n
                rec["chunk_tokens"] += [0] * max(0, grow + 1 - len(rec["chunk_tokens"]))
                rec["chunk_tokens"][grow] += 1
                if rec["ttft"] is None:
                    rec["ttft"] = now - t0
                else:
                    rec["itl"].extend([(now - last_t) / (n - last_n)] * (n - last_n))
                last_t, last_n = now, n
        rec.update(ok=last_n > 0 and "error" not in rec, completion_tokens=last_n, latency=clock() - t0)
        if last_n == 0 and "error" not in rec:
            rec["error"] = "the stream ended without tokens"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        rec["error"] = f"{exc.__class__.__name__}: {exc}"
        rec["completion_tokens"] = last_n
    finally:
        conn.close()
    rec["prompt_tokens"] = meta.get("prompt_tokens")
    rec["cached_tokens"] = meta.get("cached_tokens")
    fr = meta.get("finish_reason")
    rec["finish_reason"] = fr.get("type") if isinstance(fr, dict) else fr
    for key in SPEC_KEYS:
        if meta.get(key) is not None:
            rec[key] = meta[key]
    # the draft counts under the record's names whatever the server's sglang calls them (0.5.11:
    # spec_accepted_drafts; from 0.5.17 spec_num_correct_drafts, dflash_common/sglang.py)
    for key, value in (("spec_accepted_drafts", accepted_drafts(meta)), ("spec_proposed_drafts", proposed_drafts(meta))):
        if value is not None:
            rec[key] = value
    rec["text"] = text if isinstance(text, str) else ""
    return rec


def server_readings(base_url, timeout=10.0) -> dict:
    """/metrics (sglang:spec_accept_length and the counters) and /get_server_info, as far as they answer
    (dflash_smoke.http_json: no api key is sent; the per-request figures come from /generate, which gets it)."""
    out = {}
    try:
        status, text = http_json("GET", base_url + "/metrics", None, timeout)
        if status == 200:
            m = parse_prometheus(text)
            out["metrics"] = {k.split(":", 1)[1]: v for k, v in m.items() if k.startswith("sglang:")
                              and k.split(":", 1)[1] in ("spec_accept_length", "spec_accept_rate",
                                                         "generation_tokens_total", "prompt_tokens_total",
                                                         "num_requests_total", "cache_hit_rate")}
    except SmokeError as exc:
        out["metrics_error"] = str(exc)
    try:
        status, info = http_json("GET", base_url + "/get_server_info", None, timeout)
        if status == 200 and isinstance(info, dict):
            states = info.get("internal_states") or [{}]
            out["server_info"] = {"version": info.get("version"), "stand_in": info.get("stand_in") or None,
                                  "speculative_algorithm": info.get("speculative_algorithm"),
                                  "attention_backend": (states[0] or {}).get("attention_backend")
                                  or info.get("attention_backend"),
                                  "avg_spec_accept_length": (states[0] or {}).get("avg_spec_accept_length")}
    except SmokeError as exc:
        out["server_info_error"] = str(exc)
    return out


def _jobs(workload, concurrency, opts) -> list:
    """One list of payloads per worker (the agentic workload builds its payloads as it goes)."""
    if workload == "seeds":
        reqs = wl.seeds_requests(concurrency, opts.get("seeds_max_tokens", 256))
    elif workload == "random":
        r = opts.get("random") or {}
        reqs = wl.random_requests(concurrency, r.get("input_len", 256), r.get("output_len", 256),
                                  r.get("per_slot", 2), opts.get("seed", 0))
    else:
        raise ValueError(f"unknown workload {workload!r}")
    return [reqs[i::int(concurrency)] for i in range(int(concurrency))]


def run_cell(base_url, workload, concurrency, opts=None, timeout=120.0, clock=time.monotonic, api_key=None) -> dict:
    """Measure one cell; -> {status, summary, requests, server_before, server_after, seconds, errors}."""
    opts = dict(opts or {})
    hdr = auth_headers(api_key)
    t_begin = clock()
    deadline = t_begin + float(timeout)
    before = server_readings(base_url)
    warm = stream_generate(base_url, {"text": wl.chatml([{"role": "user", "content": "Hello"}]),
                                      "sampling_params": wl.sampling(8)}, min(60.0, float(timeout)), headers=hdr)
    results, lock = [], threading.Lock()

    def left():
        return deadline - clock()

    def record(label, rec, worker):
        rec.update(label=label, worker=worker)
        with lock:
            results.append(rec)

    def worker_list(w, payloads):
        for item in payloads:
            if left() <= 0:
                record(item["label"], {"ok": False, "skipped": True, "error": "cell time limit"}, w)
                continue
            record(item["label"], stream_generate(base_url, item["payload"], left(), headers=hdr, left=left), w)

    def worker_agent(w):
        a = opts.get("agent") or {}
        messages = wl.agent_opening(w)
        for turn in range(int(a.get("turns", 4))):
            label = f"session{w}/turn{turn}"
            if left() <= 0:
                record(label, {"ok": False, "skipped": True, "error": "cell time limit"}, w)
                continue
            rec = stream_generate(base_url, wl.agent_payload(messages, a.get("max_tokens", 64)), left(), headers=hdr,
                                  left=left)
            reply = rec.get("text") or ""
            rec["turn"] = turn
            record(label, rec, w)
            if not rec.get("ok"):
                break
            messages = wl.agent_next(messages, reply.strip(), w, turn)

    jobs = None if workload == "agent" else _jobs(workload, concurrency, opts)
    t0 = clock()
    threads = []
    for w in range(int(concurrency)):
        target, args = (worker_agent, (w,)) if jobs is None else (worker_list, (w, jobs[w]))
        th = threading.Thread(target=target, args=args, daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join(max(0.0, left()) + 5.0)
    wall = clock() - t0
    after = server_readings(base_url)
    for rec in results:
        rec.pop("text", None)
    results.sort(key=lambda r: (r.get("worker", 0), r.get("label", "")))
    summary = summarize(results, wall)
    if summary["completed"] == 0:
        status = "failed"
    elif summary["skipped"] or summary["failed"] or any(th.is_alive() for th in threads):
        status = "partial"
    else:
        status = "ok"
    errors = sorted({r["error"] for r in results if r.get("error")})
    return {"status": status, "summary": summary, "requests": results, "warmup": {k: warm.get(k) for k in (
        "ok", "error", "completion_tokens")}, "server_before": before, "server_after": after,
        "seconds": round(clock() - t_begin, 3), "errors": errors[:5]}
