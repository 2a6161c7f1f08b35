#!/usr/bin/env python3
"""A bounded client loop through the router (molecule/fleet): chat completions back to back until a
stop file appears or the time runs out; writes what it saw as JSON. Stdlib only.

usage: fleet-client-loop URL STOP_FILE OUT_JSON [MAX_SECONDS]
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request


def main():
    url, stop, out = sys.argv[1:4]
    limit = float(sys.argv[4]) if len(sys.argv) > 4 else 600.0
    body = json.dumps({"model": "/dev/shm/Qwen3.6-27B", "temperature": 0, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "fibonacci"}]}).encode()
    t0 = time.time()
    ok, failures, last_ok, max_gap = 0, [], t0, 0.0
    while not os.path.exists(stop) and time.time() - t0 < limit:
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
        t = time.time()
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                data = json.loads(resp.read())
            msg = data["choices"][0]["message"]
            if not (msg.get("content") or msg.get("reasoning_content")):
                raise ValueError(f"empty answer: {data}")
            ok += 1
            max_gap = max(max_gap, time.time() - last_ok)
            last_ok = time.time()
        except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            body_text = exc.read().decode()[:200] if hasattr(exc, "read") else ""
            failures.append({"at": round(t - t0, 3), "error": f"{exc.__class__.__name__}: {exc} {body_text}".strip()})
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"requests": ok + len(failures), "ok": ok, "failed": len(failures), "failures": failures[:50],
                   "seconds": round(time.time() - t0, 1), "max_gap_s": round(max_gap, 3)}, fh, indent=2)
        fh.write("\n")


if __name__ == "__main__":
    main()
