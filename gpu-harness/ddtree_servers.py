"""sglang servers for the DDTree GPU harnesses (standard library only): start, health, generate, stop.

Used by gpu-harness/ddtree_e2e.py (speed) and gpu-harness/ddtree_lossless.py (lossless checks). Every
server starts in its own process session and stop_all() ends each session (TERM, then KILL after
a bounded grace), so no call leaves a server holding the GPU; each is registered for
gpu-harness/stop_servers.py too, which ends what a cut-short run left.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import gpu_memory
import stop_servers

# What a request to a server that is not (or no longer) answering HTTP raises: refused or reset
# connections, timeouts, bad JSON, and whatever else holds the port while the server starts (an H200
# run of 2026-12-03 got its own request line back from a port a starting server had not bound yet:
# http.client.BadStatusLine, which is not an OSError).
HTTP_ERRORS = (OSError, ValueError, http.client.HTTPException)
# The series' switches, set for a run in the harness's environment and handed to the servers it starts:
# the walk graph (0105/0106), the build kernel (0107), the GDN verify's value block (0108), the GDN tree verify
# node by node (0109), the conv update from the given parents and its block (0110). Unset: each server keeps the
# series' default.
PASSED_ENV = {"DDTREE_WALK_GRAPH": "SGLANG_DDTREE_WALK_GRAPH", "DDTREE_BUILD_KERNEL": "SGLANG_DDTREE_BUILD_KERNEL",
              "DDTREE_GDN_VERIFY_BLOCK_V": "SGLANG_GDN_VERIFY_BLOCK_V", "DDTREE_GDN_TREE_PATHS": "SGLANG_GDN_TREE_PATHS",
              "DDTREE_CONV_PARENTS": "SGLANG_DDTREE_CONV_PARENTS", "DDTREE_CONV_BLOCK_N": "SGLANG_DDTREE_CONV_BLOCK_N"}  # fmt: skip


def passed_env(environ=None, skip=()):
    """The server environment for the switches set in `environ` (os.environ by default), less `skip`."""
    environ = os.environ if environ is None else environ
    return {server: environ[ours] for ours, server in PASSED_ENV.items() if ours not in skip and environ.get(ours)}


def write_json(path, obj, indent=1):
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=indent)


def read_text(path):
    with open(path, errors="replace") as fh:
        return fh.read()


class Server:
    """One `python -m sglang.launch_server` with its log, port and the test-only switch files.

    args: everything after the port (model, draft, algorithm, flags). env: added to os.environ.
    budget/topk/block/level/mode describe it for the summary (the tree depth is the worker's
    min(block - 1, budget)). family: its model folder's kind (gpu_memory.MODELS), for size_for_gpu()."""

    def __init__(self, name, port, args, out, work, env=None, spec=True, level="full", budget=None, topk=8,
                 block=16, mode="tree", family=None):  # fmt: skip
        self.name, self.port, self.spec, self.level, self.family = name, port, spec, level, family
        self.baseline = None  # the server a speed ratio is taken against (ddtree_e2e.py: the DFLASH of its mode)
        self.static_mib = None  # set by size_for_gpu(): --mem-fraction-static is sized from it at start
        self.budget, self.topk, self.block, self.mode = budget, topk, block, mode
        self.depth_count = min(block - 1, budget) if budget else block - 1
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = os.path.join(out, f"{name}.server.log")
        self.timing_path = os.path.join(work, f"timing-{name}.jsonl")
        self.env = dict(env or {})
        self.proc = None
        self.t0 = None
        self.healthy_after = None
        self.error = None
        self.cmd = [sys.executable, "-m", "sglang.launch_server", "--port", str(port), *args]

    @property
    def verify_tokens(self):
        """Tokens a speculative step verifies: budget + 1 for DDTREE, the block for DFLASH."""
        return self.budget + 1 if self.budget else self.block

    def set_arg(self, flag, value):
        """Give flag this value in the command (appended when absent)."""
        if flag in self.cmd:
            self.cmd[self.cmd.index(flag) + 1] = value
        else:
            self.cmd += [flag, value]

    def start(self):
        if self.static_mib is not None:  # its pool as a fraction of what is free now (gpu_memory.fraction)
            try:
                self.set_arg("--mem-fraction-static", str(gpu_memory.fraction(self.static_mib, gpu_memory.query()[1])))
            except (gpu_memory.MemoryPlanError, OSError, subprocess.SubprocessError, ValueError) as exc:
                self.error = f"not started: {exc}"
                print(f"[{self.name}] {self.error}", flush=True)
                return
        env = dict(os.environ)
        env.update(self.env)
        self.t0 = time.time()
        with open(self.log_path, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # fmt: skip
        stop_servers.register(self.proc.pid, f"ddtree-{self.name}")
        pids = os.environ.get("DDTREE_PID_FILE")
        if pids:  # the .sh ends these process groups if a run is cut short (gpu-harness/ddtree_setup.sh)
            with open(pids, "a") as fh:
                fh.write(f"{self.proc.pid}\n")
        print(f"[{self.name}] start: {' '.join(self.cmd[3:])}", flush=True)

    def log_has(self, text):
        try:
            return text in read_text(self.log_path)
        except OSError:
            return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_health(self):
        if self.healthy_after is not None:
            return True
        if self.proc is None:
            return False  # not started yet
        if not self.alive():
            self.error = self.error or f"exited rc={self.proc.returncode if self.proc else None}"
            return False
        try:
            ok = urllib.request.urlopen(self.base + "/health", timeout=5).status == 200
        except HTTP_ERRORS:
            ok = False  # not listening (or not answering HTTP) yet
        if ok:
            self.healthy_after = round(time.time() - self.t0, 1)
            if self.error == "not healthy in time":
                self.error = None
            print(f"[{self.name}] healthy after {self.healthy_after} s", flush=True)
        return ok

    def post(self, path, body, timeout=120):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        return json.loads(urllib.request.urlopen(req, timeout=timeout).read() or b"null")

    def generate(self, ids, n_new, timeout=120, **extra):
        """Greedy /generate from input_ids (one prompt or a list of them) -> (response, seconds)."""
        body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": n_new,
                                                      "ignore_eos": True}}  # fmt: skip
        body.update(extra)
        t = time.time()
        out = self.post("/generate", body, timeout)
        return out, time.time() - t

    def flush_cache(self):
        try:
            urllib.request.urlopen(urllib.request.Request(self.base + "/flush_cache", data=b"", method="POST"),
                                   timeout=30).read()  # fmt: skip
            return True
        except HTTP_ERRORS:
            return False


def start_staggered(servers, deadline, marker="Memory pool end", per_server_s=75, on_wait=None):
    """Start servers one after another: the next once this one has sized its memory pool (the pools
    are sized from free memory), or after per_server_s, or at the deadline."""
    for s in servers:
        s.start()
        t = time.time()
        while time.time() - t < per_server_s and time.time() < deadline and s.alive() and not s.log_has(marker):
            for o in servers:
                o.check_health()
            if on_wait:
                on_wait()
            time.sleep(0.5)
        if not s.alive():
            s.error = s.error or f"exited during start, see {os.path.basename(s.log_path)}"
            print(f"[{s.name}] {s.error}", flush=True)


def size_for_gpu(servers, max_total_tokens, gpu=0):
    """Size every server for the GPU they share (gpu_memory.plan): the request/KV knobs set in each command,
    each one's static pool kept for its start. Returns the plan; raises gpu_memory.MemoryPlanError (nothing
    started) when they cannot fit at once."""
    total, free = gpu_memory.query(gpu)
    plan = gpu_memory.plan(total, free, [{"name": s.name, "model": s.family, "args": s.cmd,
                                          "verify_tokens": s.verify_tokens} for s in servers], max_total_tokens)
    for s in servers:
        for flag, value in plan.knobs(max_total_tokens).items():
            s.set_arg(flag, value)
        s.static_mib = plan.static_mib[s.name]
    print(f"[memory] {plan.describe()}", flush=True)
    return plan


def wait_healthy(servers, deadline):
    while time.time() < deadline and not all(s.healthy_after or not s.alive() for s in servers):
        for s in servers:
            s.check_health()
        time.sleep(1)
    for s in servers:
        if not s.check_health() and s.error is None:
            s.error = "not healthy in time"


def stop_all(servers, grace_s=15):
    """SIGTERM every server's process group at once, SIGKILL what is left after grace_s."""
    live = [s for s in servers if s.proc is not None and s.proc.poll() is None]
    for s in live:
        try:
            os.killpg(s.proc.pid, signal.SIGTERM)
        except OSError as e:
            print(f"[{s.name}] term: {e}", flush=True)
    end = time.time() + grace_s
    while time.time() < end and any(s.proc.poll() is None for s in live):
        time.sleep(0.5)
    for s in live:
        if s.proc.poll() is None:
            try:
                os.killpg(s.proc.pid, signal.SIGKILL)
            except OSError as e:
                print(f"[{s.name}] kill: {e}", flush=True)
    for s in servers:
        if s.proc is not None:
            stop_servers.unregister(f"ddtree-{s.name}")


def write_oracle(path, reference, ranks, topk=None):
    """The test-only oracle file (SGLANG_DDTREE_ORACLE): re-read by the servers when it changes."""
    data = {"reference": reference, "ranks": ranks}
    if topk is not None:
        data["topk"] = topk
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
    time.sleep(0.05)
