"""One endpoint: sglang-router in front of every instance of the inventory.

Pure functions, no Ansible import, plus the small HTTP client the `dflash_router_worker` module
uses on the router host. The router is sglang-router 0.3.2 (`python -m sglang_router.launch_router`,
its own venv layer): workers are given as `--worker-urls` at start and changed at run time through
its HTTP API, as 0.3.2 answers it:

  GET    /workers               {"workers": [{"id", "url", "is_healthy", "load", ...}], "total"}
  POST   /workers {"url": ...}  202 {"status": "accepted", "worker_id"}: registered in the background
                                once the worker answers its health check
  DELETE /workers/{id}          202: removed in the background (id is the UUID, not the URL)
  GET    /readiness             {"status": "ready", "healthy_workers", "total_workers"}
  GET    /health, /liveness     200 "OK"
  metrics: http://<prometheus-host>:<prometheus-port>/metrics (smg_* names)

A rolling deploy drains an instance (removes it, then waits until its own /metrics shows no running
or queued request) before the restart and adds it back once its smoke test passed.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
import urllib.error
import urllib.request

from ansible.module_utils.dflash_common.net import WILDCARDS, url_host
from ansible.module_utils.dflash_instances.tp import nnodes_of
from ansible.module_utils.dflash_release.smoke import SmokeError, check_chat
from ansible.module_utils.dflash_release.wait import judge

POLICIES = ("random", "round_robin", "cache_aware", "power_of_two")
INFLIGHT_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _loopback(address) -> bool:
    a = str(address).strip("[]")
    return a == "localhost" or a == "::1" or a.startswith("127.")


def listen_address(inst, entry, host):
    """-> (bind, address to reach it at): the instance's `host`, else the host's bind default
    (127.0.0.1); a wildcard bind is reached at the host's address."""
    bind = str(inst.get("host") or (entry or {}).get("bind") or "127.0.0.1")
    return bind, ((entry or {}).get("address") or host) if bind in WILDCARDS else bind


def workers(fleet) -> list:
    """The router's workers: every instance that serves the HTTP API (single-node, or rank 0).

    fleet: {host: {"address": str, "bind": str, "instances": [...]}} -> [{host, instance, url, port,
    model_path, nnodes, bind, key_id, address}], sorted by host then instance. The URL's address: the host's
    address when the instance listens on every address (0.0.0.0, ::), else the address it listens on
    (its `host`, else the host's dflash_instances_bind_host, 127.0.0.1 by default)."""
    out = []
    for host in sorted(fleet or {}):
        entry = fleet[host] or {}
        for inst in entry.get("instances") or []:
            if not isinstance(inst, dict) or not _is_int(inst.get("port")):
                continue
            if nnodes_of(inst) > 1 and inst.get("node_rank", 0) != 0:
                continue  # a node rank > 0 answers /health only
            bind, where = listen_address(inst, entry, host)
            out.append({"host": host, "instance": inst.get("name"), "port": inst["port"],
                        "url": f"http://{url_host(where)}:{inst['port']}", "model_path": inst.get("model_path"),
                        "nnodes": nnodes_of(inst), "bind": bind, "key_id": key_id(inst.get("api_key")),
                        "address": entry.get("address") or host})
    return sorted(out, key=lambda w: (w["host"], str(w["instance"])))


def reach_errors(worker_list, hosts, what="the router") -> list:
    """Workers `what` on another machine (a router, Prometheus) cannot reach: they listen on loopback only.
    hosts: {host: address} of where `what` runs (a list of names: their addresses are the names); a
    host of the same address (two inventory hosts on one machine) reaches loopback."""
    errs = []
    where = hosts if isinstance(hosts, dict) else {h: h for h in hosts or ()}
    for r in sorted(where):
        for w in worker_list or []:
            same = w["host"] == r or w.get("address") == where[r]
            if not same and _loopback(w.get("bind", "")):
                errs.append(f"{w['host']}: instance '{w['instance']}' listens on {w['bind']} only: {what} on {r} "
                            "cannot reach it; set the instance's host (or dflash_instances_bind_host) to 0.0.0.0 "
                            "or an address of that host, with an api_key")
    return errs


def key_id(api_key):
    """A short digest that tells API keys apart without showing them (None: no key)."""
    return hashlib.sha256(str(api_key).encode()).hexdigest()[:12] if api_key else None


def worker_api_key(fleet, worker_list):
    """The API key the router's clients send: the api_key of the first worker's instance (check_settings
    refuses workers that do not share one), or None."""
    for w in worker_list or []:
        for inst in (fleet.get(w["host"]) or {}).get("instances") or []:
            if isinstance(inst, dict) and inst.get("name") == w["instance"]:
                return inst.get("api_key") or None
    return None


def check_settings(settings, worker_list, own_instances=()) -> list:
    """Errors in the router settings (in the inventory's words); own_instances: the router host's own
    instances (their ports are taken)."""
    errs = []
    s = settings or {}
    taken = {i.get("port"): i.get("name") for i in own_instances or () if isinstance(i, dict)}
    for key in ("port", "prometheus_port"):
        if s.get(key) in taken:
            errs.append(f"dflash_router_{key}: {s[key]} is also the port of instance '{taken[s[key]]}' on this host")
    for key in ("port", "prometheus_port"):
        v = s.get(key)
        if not _is_int(v) or not 1024 <= v <= 65535:
            errs.append(f"dflash_router_{key}: {v!r} is not a port 1024..65535 (the router runs as a non-root user)")
    if _is_int(s.get("port")) and s.get("port") == s.get("prometheus_port"):
        errs.append(f"dflash_router_prometheus_port: {s['port']} is also dflash_router_port")
    if s.get("policy") not in POLICIES:
        errs.append(f"dflash_router_policy: {s.get('policy')!r} is not one of {', '.join(POLICIES)}")
    if not worker_list:
        errs.append("dflash_routers: the router would have no worker (no host of dflash_hosts has an instance)")
    if len({w.get("key_id") for w in worker_list or []}) > 1:
        errs.append("dflash_routers: the workers do not share one api_key (or some have none): a client of the "
                    "one endpoint sends one key, so some requests would get 401; give every instance the same "
                    "api_key (the key itself is not shown)")
    models = sorted({str(w.get("model_path")) for w in worker_list or []})
    if len(models) > 1 and not s.get("allow_mixed_models"):
        errs.append(f"dflash_routers: the workers serve different models ({', '.join(models)}); one router "
                    "endpoint balances one model (set dflash_router_allow_mixed_models: true if the clients "
                    "name the model and that is intended)")
    for a in s.get("extra_args") or []:
        if any(c.isspace() for c in str(a)):
            errs.append(f"dflash_router_extra_args: {str(a)!r} contains whitespace: one argument per item")
    return errs


def router_args(settings, worker_list) -> list:
    """What follows `python -m sglang_router.launch_router`."""
    s = settings or {}
    args = ["--host", str(s.get("bind_host", "0.0.0.0")), "--port", str(s["port"]),
            "--policy", str(s.get("policy", "cache_aware")),
            "--prometheus-host", str(s.get("prometheus_host", "0.0.0.0")),
            "--prometheus-port", str(s["prometheus_port"]),
            "--health-check-interval-secs", str(s.get("health_check_interval", 10)),
            "--log-level", str(s.get("log_level", "info"))]
    urls = [w["url"] for w in worker_list or []]
    if urls:
        args += ["--worker-urls"] + urls
    args += [str(a) for a in s.get("extra_args") or []]
    return args


# --------------------------------------------------------------------------- router API

def parse_workers(body) -> dict:
    """GET /workers -> {url: {id, healthy, load}}."""
    out = {}
    items = body.get("workers") if isinstance(body, dict) else body
    for w in items or []:
        if isinstance(w, dict) and w.get("url"):
            out[str(w["url"]).rstrip("/")] = {"id": w.get("id"), "healthy": bool(w.get("is_healthy")),
                                              "load": w.get("load")}
    return out


_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text) -> dict:
    """Prometheus text format -> {name: [value, ...]} (labels dropped; comments skipped)."""
    out = {}
    for line in str(text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            continue
        try:
            out.setdefault(m.group(1), []).append(float(m.group(3)))
        except ValueError:
            continue
    return out


def inflight(metrics_text):
    """Running + queued requests an sglang server reports on /metrics, or None when it reports neither."""
    m = parse_metrics(metrics_text)
    found = [sum(m[n]) for n in INFLIGHT_METRICS if n in m]
    return int(sum(found)) if found else None


def http(method, url, body=None, timeout=10.0, api_key=None):
    """-> (status, parsed JSON or text, error text or None). Never raises for HTTP or network errors.
    api_key: sent as `Authorization: Bearer <key>` (as the instances' smoke client does)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if data else {}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode("utf-8", "replace")
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read().decode("utf-8", "replace"), exc.code
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return None, None, str(getattr(exc, "reason", exc))
    try:
        return status, json.loads(raw), None
    except ValueError:
        return status, raw, None


class RouterError(Exception):
    pass


def list_workers(router, call=http) -> dict:
    status, body, err = call("GET", router.rstrip("/") + "/workers")
    if status != 200:
        raise RouterError(f"GET {router}/workers: {err or f'HTTP {status}: {str(body)[:200]}'}")
    return parse_workers(body)


def set_worker(router, url, state, timeout=120.0, interval=0.5, drain_timeout=60.0, check_mode=False,
               call=http, clock=time.monotonic, sleep=time.sleep) -> dict:
    """Make `url` absent from (drain) or present and healthy in the router. -> {changed, seconds, inflight,
    warnings}. absent: DELETE by id, wait until the router no longer lists it, then until the worker's own
    /metrics shows no running or queued request (at most drain_timeout). present: POST, wait until the
    router lists it healthy (at most timeout)."""
    url = url.rstrip("/")
    t0 = clock()
    res = {"changed": False, "seconds": 0.0, "warnings": [], "url": url, "state": state}
    have = list_workers(router, call)
    if state == "absent":
        if url in have:
            res["changed"] = True
            if check_mode:
                return res
            status, body, err = call("DELETE", f"{router.rstrip('/')}/workers/{have[url]['id']}")
            if status not in (200, 202, 204):
                raise RouterError(f"DELETE worker {url}: {err or f'HTTP {status}: {str(body)[:200]}'}")
            while url in list_workers(router, call):
                if clock() - t0 > timeout:
                    raise RouterError(f"the router still lists {url} {timeout:g} s after removing it")
                sleep(interval)
        if not check_mode:
            # in-flight requests finish on the worker before it restarts
            left = None
            while True:
                status, body, _err = call("GET", url + "/metrics", timeout=5.0)
                left = inflight(body) if status == 200 and isinstance(body, str) else None
                if not left:
                    break
                if clock() - t0 > drain_timeout:
                    res["warnings"].append(f"{url}: {left} request(s) still running after {drain_timeout:g} s of "
                                           "draining; the restart will cut them")
                    break
                sleep(interval)
            res["inflight"] = left
            if left is None and status != 200 and res["changed"]:
                res["warnings"].append(f"{url}: no /metrics (metrics off or the server is down): in-flight "
                                       "requests were not waited for")
    elif state == "present":
        cur = have.get(url)
        if cur and cur["healthy"]:
            return res
        res["changed"] = True
        if check_mode:
            return res
        if not cur:
            status, body, err = call("POST", router.rstrip("/") + "/workers", {"url": url})
            if status not in (200, 201, 202):
                raise RouterError(f"POST worker {url}: {err or f'HTTP {status}: {str(body)[:200]}'}")
        while True:
            cur = list_workers(router, call).get(url)
            if cur and cur["healthy"]:
                break
            if clock() - t0 > timeout:
                raise RouterError(f"the router does not list {url} as healthy {timeout:g} s after adding it "
                                  f"({'listed, unhealthy' if cur else 'not listed: its health check fails'})")
            sleep(interval)
    else:
        raise RouterError(f"state must be absent or present, got {state!r}")
    res["seconds"] = round(clock() - t0, 3)
    return res


# Run in the router's layer before its unit points at it: launch_router imports the whole HTTP stack
# (fastapi, uvicorn, ...), so a layer that misses a dependency fails here, not after the restart
PROBE_CODE = ("import sglang_router.launch_router, importlib.metadata as m; "
              "print(m.version('sglang-router'))")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)):\s*(.*)$")
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def probe_failure(stderr: str, rc=None) -> str:
    """The cause of a failed import probe, from the interpreter's stderr: the last exception line, the
    file that raised it (the innermost frame), and for a missing module what to do about it."""
    lines = [ln.rstrip() for ln in (stderr or "").splitlines() if ln.strip()]
    exc = next((ln.strip() for ln in reversed(lines) if _EXC_LINE.match(ln.strip())), None)
    frames = [ln.strip() for ln in lines if ln.strip().startswith('File "')]
    where = ""
    if frames:
        m = re.match(r'File "([^"]+)", line (\d+)', frames[-1])
        if m:
            where = f" (raised in {m.group(1).rsplit('site-packages/', 1)[-1]}:{m.group(2)})"
    if exc is None:
        tail = " | ".join(lines[-3:]) if lines else "no output"
        return f"exit status {rc}: {tail}"
    msg = exc + where
    missing = _MISSING_MODULE.search(exc)
    if missing:
        top = missing.group(1).split(".")[0]
        msg += (f"; the layer lacks the distribution that provides '{top}': add it to the router's layer "
                f"requirements (a layer with no_deps must list every dependency), or let uv resolve them")
    return msg


def probe_layer(python, run=subprocess.run, timeout=120.0) -> dict:
    """Import the router's entry point with the layer's interpreter -> {ok, version, error}."""
    try:
        proc = run([python, "-c", PROBE_CODE], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "version": None, "error": f"{python} could not run: {exc}"}
    if proc.returncode == 0:
        out = (proc.stdout or "").strip().splitlines()
        return {"ok": True, "version": out[-1] if out else None, "error": None}
    return {"ok": False, "version": None, "error": probe_failure(proc.stderr, proc.returncode)}


def router_gone(state, log_tail=""):
    """A unit state (`systemctl show` keys, or the runner's) whose verdict, as for an instance
    (dflash_release/wait.py judge), says the router's process is gone or crash-looping -> the error message; None
    while it runs or starts."""
    state = state or {}
    # restarts counted before this wait (NRestarts outlives a manual start) are not this start's
    verdict = judge(state, None, baseline_restarts=state.get("NRestarts") or 0)
    if verdict not in ("failed", "restarted", "exited", "missing"):
        return None
    if verdict == "missing":
        return f"its unit is not loaded (LoadState={state.get('LoadState')})"
    msg = f"its process is gone ({verdict}: ActiveState={state.get('ActiveState')}, SubState={state.get('SubState')}"
    if state.get("ExecMainStatus") not in (None, ""):
        msg += f", exit status {state.get('ExecMainStatus')}"
    msg += ")"
    lines = [ln for ln in (log_tail or "").splitlines() if ln.strip()]
    exc = probe_failure("\n".join(lines)) if lines else ""
    if exc and not exc.startswith("exit status"):
        msg += f": {exc}"
    elif lines:
        msg += ": " + " | ".join(ln.strip() for ln in lines[-3:])
    return msg


def wait_router(router, expect=(), timeout=120.0, interval=0.5, min_healthy=1, call=http, clock=time.monotonic,
                sleep=time.sleep, unit_state=None, log_tail=None) -> dict:
    """Wait until the router answers /health and lists the expected workers healthy (all of them, or at
    least min_healthy once the timeout is near). -> {seconds, healthy: [url], missing: [url]}; raises when
    the router never answers or fewer than min_healthy workers are healthy at the timeout, and at once
    when unit_state() (its unit's state) says its process is gone twice in a row while /health does not
    answer (log_tail(): its log since the start, for the cause)."""
    t0 = clock()
    expect = [u.rstrip("/") for u in expect or []]
    last_err, have, dead = None, {}, 0
    while True:
        status, _body, err = call("GET", router.rstrip("/") + "/health", timeout=5.0)
        if status != 200 and unit_state is not None:
            state = unit_state()
            dead = dead + 1 if router_gone(state) else 0
            if dead >= 2:  # the cause from the same state, with the log's tail
                raise RouterError(f"the router at {router} does not answer and "
                                  f"{router_gone(state, log_tail() if log_tail else '')} "
                                  f"after {clock() - t0:.1f} s")
        if status == 200:
            try:
                have = list_workers(router, call)
                last_err = None
            except RouterError as exc:
                last_err = str(exc)
            healthy = [u for u, w in have.items() if w["healthy"]]
            if not expect and healthy or expect and all(u in healthy for u in expect):
                break
        else:
            last_err = err or f"/health: HTTP {status}"
        if clock() - t0 > timeout:
            healthy = [u for u, w in have.items() if w["healthy"]]
            if last_err and not have:
                raise RouterError(f"the router at {router} did not answer in {timeout:g} s: {last_err}")
            if len(healthy) < min_healthy:
                raise RouterError(f"the router lists {len(healthy)} healthy worker(s) after {timeout:g} s "
                                  f"(need {min_healthy}); registered: {sorted(have) or 'none'}")
            break
        sleep(interval)
    healthy = sorted(u for u, w in have.items() if w["healthy"])
    return {"seconds": round(clock() - t0, 3), "healthy": healthy,
            "missing": [u for u in expect if u not in healthy]}


def smoke_router(router, prompt, max_tokens=64, temperature=0.0, timeout=120.0, call=http, clock=time.monotonic,
                 api_key=None):
    """One chat completion through the router (the model from its /v1/models) -> the record of check_chat.
    api_key: the workers' key, sent the way a client of the endpoint sends it (the router passes it on)."""
    base = router.rstrip("/")
    auth = {"api_key": api_key} if api_key else {}
    status, models, err = call("GET", base + "/v1/models", timeout=timeout, **auth)
    if status != 200 or not isinstance(models, dict) or not models.get("data"):
        raise RouterError(f"GET {base}/v1/models through the router: {err or f'HTTP {status}: {str(models)[:200]}'}")
    model = models["data"][0].get("id")
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": temperature,
            "max_tokens": max_tokens}
    t = clock()
    status, out, err = call("POST", base + "/v1/chat/completions", body, timeout=timeout, **auth)
    if status is None:
        raise RouterError(f"POST {base}/v1/chat/completions: {err}")
    try:
        rec = check_chat(status, out, clock() - t)
    except SmokeError as exc:  # the same wording as an instance's smoke test
        raise RouterError(f"through the router: {exc}") from None
    rec.update(model=model, via=f"{base}/v1/chat/completions")
    return rec
