"""Smoke-test logic of dflash_release against real sglang 0.5.11 (GPU machine, dummy weights).

Runs module_utils/dflash_release/wait.py's wait_units + smoke.py's smoke_instance (the code the dflash_wait /
dflash_smoke modules run) against real servers, so the response shapes they rely on are checked:
  dflash   DFLASH server: wait (process state + /health at 0.25 s) -> /generate from input_ids
           (--skip-tokenizer-init: config-only models have no tokenizer) -> /get_server_info names
           DFLASH -> /generate meta_info has spec_verify_ct > 0 and spec_accept_length
  crash    the same server with an xgrammar 0.1.10 lookalike first on PYTHONPATH (no StructuralTag:
           the seeds' crash): does it die at start-up, how fast is the verdict, what does
           dflash_diagnose say about the real log
usage: smoke_real.py OUTDIR   (PYTHONPATH must hold the sglang bundle; see smoke_real.sh)
"""

import json
import os
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))

from ansible.module_utils.dflash_diagnose import engine
from ansible.module_utils.dflash_release import smoke as dflash_smoke
from ansible.module_utils.dflash_release import wait as dflash_wait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stop_servers

OUT = sys.argv[1]
MODELS = os.path.join(OUT, "models")


def write_models():
    # config-only Qwen3-0.6B-shaped target + 5-layer DFlash draft (gpu-harness/make_models.py)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_models

    make_models.write_configs(MODELS)


def args_for(port):
    return ["--model-path", os.path.join(MODELS, "target"), "--load-format", "dummy", "--skip-tokenizer-init",
            "--mem-fraction-static", "0.5", "--cuda-graph-max-bs", "4", "--context-length", "4096",
            "--attention-backend", "triton", "--host", "127.0.0.1", "--port", str(port),
            "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", os.path.join(MODELS, "draft")]


class Proc:
    """A server process seen the way dflash_wait sees a unit (ActiveState from the process)."""

    def __init__(self, name, args, env_extra=None):
        self.log_path = os.path.join(OUT, f"{name}.server.log")
        env = dict(os.environ, **(env_extra or {}))
        self.t0 = time.time()
        with open(self.log_path, "w") as log:
            self.p = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *args], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.name = name
        stop_servers.register(self.p.pid, f"smoke-{name}")

    def show(self, _unit):
        rc = self.p.poll()
        if rc is None:
            return {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0}
        return {"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed", "NRestarts": 0,
                "ExecMainStatus": rc}

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except OSError as exc:
                print(f"[smoke] kill: {exc}", flush=True)
        stop_servers.unregister(f"smoke-{self.name}")


def wait(proc, port, timeout):
    inst = [{"name": "x", "unit": "x", "health_url": f"http://127.0.0.1:{port}/health"}]
    t = time.time()
    res = dflash_wait.wait_units(inst, show=proc.show, health=dflash_wait.health_status, timeout=timeout,
                                  interval=0.25)
    res["wall_s"] = round(time.time() - t, 2)
    return res


def main():
    os.makedirs(OUT, exist_ok=True)
    write_models()
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    # 1. healthy DFLASH server: wait + smoke
    port = 30011
    args = args_for(port)
    srv = Proc("dflash", args)
    try:
        res = wait(srv, port, 480)
        summary["dflash_wait"] = {"verdict": res["verdict"], "seconds": res["seconds"]}
        if res["verdict"] == "healthy":
            try:
                rec = dflash_smoke.smoke_instance(f"http://127.0.0.1:{port}", args, timeout=120)
                rec["passed"] = True
            except dflash_smoke.SmokeError as exc:
                rec = dict(exc.record, passed=False)
            summary["dflash_smoke"] = rec
            # raw shapes, for the record
            _, info = dflash_smoke.http_json("GET", f"http://127.0.0.1:{port}/get_server_info", None, 30)
            summary["server_info_keys"] = sorted(info)[:400] if isinstance(info, dict) else str(info)[:500]
            summary["server_info_speculative_algorithm"] = (info or {}).get("speculative_algorithm")
        print(json.dumps({k: summary[k] for k in summary if k != "server_info_keys"}, indent=1), flush=True)
    finally:
        srv.stop()

    # 2. the seeds' xgrammar crash: an xgrammar 0.1.10 lookalike (no StructuralTag) first on the path
    shadow = os.path.join(OUT, "shadow", "xgrammar")
    os.makedirs(shadow, exist_ok=True)
    with open(os.path.join(shadow, "__init__.py"), "w") as fh:
        fh.write('"""xgrammar 0.1.10 lookalike for the crash case: it lacks StructuralTag."""\n'
                 '__version__ = "0.1.10"\n')
    port = 30012
    srv = Proc("crash", args_for(port),
               {"PYTHONPATH": os.path.join(OUT, "shadow") + os.pathsep + os.environ.get("PYTHONPATH", "")})
    try:
        res = wait(srv, port, float(os.environ.get("CRASH_TIMEOUT", "240")))
        with open(srv.log_path, errors="replace") as fh:
            text = fh.read()
        diag = engine.diagnose_text(text, source=srv.log_path)
        summary["crash"] = {"verdict": res["verdict"], "seconds_from_start": round(time.time() - srv.t0, 2),
                            "wait_s": res["seconds"], "exit": srv.p.poll(),
                            "diagnosis": {k: diag.get(k) for k in ("cause", "summary", "remedy", "evidence")}}
        print(json.dumps(summary["crash"], indent=1), flush=True)
    finally:
        srv.stop()

    with open(os.path.join(OUT, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
