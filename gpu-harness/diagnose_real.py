#!/usr/bin/env python3
"""Real sglang 0.5.11 failures on the GPU machine, diagnosed by module_utils/dflash_diagnose/.

Each scenario starts `python -m sglang.launch_server` (dummy weights, the bundle's sglang) in a state
that makes it fail the way the seeds' deployment failed, keeps the whole log, and checks that
`dflash_diagnose` names the cause. The logs are the point: real 0.5.11 output for the fixtures.

usage: diagnose_real.py --models DIR --out DIR [--only NAME,...] [--deadline-s N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(HERE, "..", "module_utils"))

from ansible.module_utils.dflash_diagnose.engine import diagnose_text

sys.path.insert(0, HERE)
import stop_servers

PY = sys.executable

# sitecustomize snippets put first on PYTHONPATH of one scenario
BLOCK_MODULE = textwrap.dedent('''
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == {name!r}:
                raise ModuleNotFoundError("No module named %r" % name, name=name)
            return None
    sys.meta_path.insert(0, _Block())
''')
STRIP_ATTR = textwrap.dedent('''
    import importlib.abc, importlib.util, sys
    class _Strip(importlib.abc.MetaPathFinder):
        """Load {module} normally, then remove {attr} (as an older {module} would lack it)."""
        def find_spec(self, name, path=None, target=None):
            if name != {module!r}:
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            real_exec = spec.loader.exec_module
            def exec_module(mod):
                real_exec(mod)
                mod.__dict__.pop({attr!r}, None)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Strip())
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def base_args(models: str, port: int, model: str | None = None) -> list[str]:
    return ["--model-path", model or os.path.join(models, "target"), "--load-format", "dummy",
            "--attention-backend", "triton", "--disable-cuda-graph", "--mem-fraction-static", "0.5",
            "--context-length", "4096", "--host", "127.0.0.1", "--port", str(port)]


def scenarios(models: str, work: str) -> list[dict]:
    def site(name, code):
        d = os.path.join(work, "site-" + name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "sitecustomize.py"), "w") as fh:
            fh.write(code)
        return d

    return [
        {"name": "healthy", "expect": ["unknown"], "wait_health": True, "timeout": 240},
        {"name": "model_missing", "expect": ["model_missing"], "timeout": 120,
         "model": "/dev/shm/Qwen3.6-27B-missing"},
        {"name": "port_in_use", "expect": ["port_in_use"], "timeout": 240, "hold_port": True},
        {"name": "cuda_oom", "expect": ["cuda_oom"], "timeout": 240, "hog_gpu": True},
        {"name": "missing_module", "expect": ["missing_module"], "timeout": 120,
         "pythonpath": site("block", BLOCK_MODULE.format(name="pybase64"))},
        {"name": "xgrammar_structural_tag", "expect": ["xgrammar_structural_tag"], "timeout": 240,
         "wait_health": True,
         "pythonpath": site("xgr", STRIP_ATTR.format(module="xgrammar", attr="StructuralTag"))},
        {"name": "flashinfer_wrong_arch", "expect": ["no_kernel_image", "flashinfer_arch"], "timeout": 300,
         "wait_health": True, "generate": True, "extra_env": {"FLASHINFER_CUDA_ARCH_LIST": "8.0"},
         "args_replace": {"--attention-backend": "flashinfer"}},
    ]


def hog_gpu(keep_free_gib: float) -> subprocess.Popen:
    code = textwrap.dedent(f'''
        import time, torch
        free, total = torch.cuda.mem_get_info()
        x = torch.empty(int(free - {keep_free_gib} * 2**30), dtype=torch.uint8, device="cuda")
        print("hog holds", x.numel() / 2**30, "GiB of", total / 2**30, flush=True)
        time.sleep(3600)
    ''')
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    stop_servers.register(proc.pid, "diagnose-hog")
    proc.stdout.readline()
    return proc


def run_one(sc: dict, models: str, out: str, deadline: float) -> dict:
    port = free_port()
    args = base_args(models, port, sc.get("model"))
    for flag, val in (sc.get("args_replace") or {}).items():
        args[args.index(flag) + 1] = val
    env = dict(os.environ)
    env.update(sc.get("extra_env") or {})
    if sc.get("pythonpath"):
        env["PYTHONPATH"] = sc["pythonpath"] + os.pathsep + env.get("PYTHONPATH", "")
    helpers = []
    if sc.get("hold_port"):
        holder = socket.socket()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", port))
        holder.listen(1)
        helpers.append(holder)
    if sc.get("hog_gpu"):
        helpers.append(hog_gpu(keep_free_gib=1.5))
    log_path = os.path.join(out, sc["name"] + ".log")
    t0 = time.monotonic()
    limit = min(sc["timeout"], max(10.0, deadline - time.monotonic()))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([PY, "-m", "sglang.launch_server", *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        stop_servers.register(proc.pid, f"diagnose-{sc['name']}")
        state = "timeout"
        while time.monotonic() - t0 < limit:
            if proc.poll() is not None:
                state = f"exited {proc.returncode}"
                break
            if sc.get("wait_health") and healthy(port):
                state = "healthy"
                if sc.get("generate"):
                    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 8}}).encode()
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body,
                                                 headers={"content-type": "application/json"})
                    try:
                        with urllib.request.urlopen(req, timeout=60) as r:
                            state += f", generate {r.status}"
                    except OSError as exc:
                        state += f", generate failed ({exc})"
                    time.sleep(3)
                break
            time.sleep(0.5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    stop_servers.unregister(f"diagnose-{sc['name']}")
    for h in helpers:
        if isinstance(h, subprocess.Popen):
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
            stop_servers.unregister("diagnose-hog")
        else:
            h.close()
    with open(log_path, errors="replace") as fh:
        text = fh.read()
    diag = diagnose_text(text, source=os.path.basename(log_path))
    ok = diag["cause"] in sc["expect"]
    return {"name": sc["name"], "expect": sc["expect"], "state": state, "seconds": round(time.monotonic() - t0, 1),
            "cause": diag["cause"], "ok": ok, "summary": diag["summary"], "remedy": diag["remedy"],
            "evidence": diag["evidence"], "log": os.path.basename(log_path), "log_lines": text.count("\n")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/root/diagnose-real")
    ap.add_argument("--only", default="")
    ap.add_argument("--deadline-s", type=float, default=540)
    a = ap.parse_args()
    deadline = time.monotonic() + a.deadline_s
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    only = {x for x in a.only.split(",") if x}
    results = []
    for sc in scenarios(a.models, a.work):
        if only and sc["name"] not in only:
            continue
        if time.monotonic() > deadline - 20:
            results.append({"name": sc["name"], "skipped": "deadline"})
            continue
        res = run_one(sc, a.models, a.out, deadline)
        results.append(res)
        print(f"[diagnose] {res['name']}: {res['state']} in {res['seconds']} s -> {res['cause']} "
              f"({'OK' if res['ok'] else 'expected ' + '/'.join(res['expect'])}): {res['summary'][:160]}",
              flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump(results, fh, indent=2)
    with open(os.path.join(a.out, "results.md"), "w") as fh:
        fh.write("| scenario | server | expected | diagnosed | summary |\n|---|---|---|---|---|\n")
        for r in results:
            if "skipped" in r:
                fh.write(f"| {r['name']} | skipped ({r['skipped']}) | | | |\n")
                continue
            fh.write(f"| {r['name']} | {r['state']} ({r['seconds']} s) | {'/'.join(r['expect'])} | "
                     f"{r['cause']} {'OK' if r['ok'] else 'MISMATCH'} | {r['summary'][:200]} |\n")
    bad = [r["name"] for r in results if not r.get("ok", True)]
    print(f"[diagnose] {len(results) - len(bad)} passed, {len(bad)} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
