"""The API key path against real sglang 0.5.11 (GPU machine, dummy weights): the unit's launcher
(roles/dflash_instances/files/dflash-launch.py) starts `-m sglang.launch_server` with DFLASH_API_KEY in
its environment, as systemd does from the instance's 0600 env file. Checked:
  auth      /v1/models and /generate answer 401 without the key, /health answers without it, and the
            smoke test (module_utils/dflash_release/smoke.py, with api_key) passes
  argv      no process of the server (sglang spawns its scheduler and detokenizer) has the key on its
            command line (/proc/<pid>/cmdline, what ps shows)
  environ   no child process inherits DFLASH_API_KEY
  log       the server log does not hold the key (the launcher masks it in the ServerArgs sglang logs)
usage (PYTHONPATH must hold the sglang bundle, as for gpu-harness/smoke_real.sh):
  python gpu-harness/launch_key_real.py OUTDIR     -> OUTDIR/summary.json, server log; exit 1 on a failed check
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import smoke_real
from ansible.module_utils.dflash_release import smoke as dflash_smoke

LAUNCH = os.path.join(REPO, "roles", "dflash_instances", "files", "dflash-launch.py")
KEY = "sk-gpu-check-" + os.urandom(8).hex()
PORT = 30013


class LaunchedProc(smoke_real.Proc):
    """smoke_real.Proc started the way the unit starts it: <python> dflash-launch -m sglang.launch_server."""

    def __init__(self, name, args):
        self.log_path = os.path.join(smoke_real.OUT, f"{name}.server.log")
        self.t0 = time.time()
        with open(self.log_path, "w") as log:
            self.p = subprocess.Popen([sys.executable, LAUNCH, "-m", "sglang.launch_server", *args],
                                      env=dict(os.environ, DFLASH_API_KEY=KEY), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.name = name
        smoke_real.stop_servers.register(self.p.pid, f"smoke-{name}")


def status(path, key=None):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}",
                                 headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def server_pids(pgid):
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.getpgid(int(pid)) == pgid:
                out.append(int(pid))
        except OSError:
            continue
    return out


def read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def main():
    smoke_real.write_models()
    args = smoke_real.args_for(PORT)
    srv = LaunchedProc("launch-key", args)
    checks = {}
    try:
        res = smoke_real.wait(srv, PORT, float(os.environ.get("START_TIMEOUT", "300")))
        checks["healthy"] = res["verdict"] == "healthy"
        checks["health_without_key"] = status("/health") == 200
        checks["models_401_without_key"] = status("/v1/models") == 401
        checks["models_200_with_key"] = status("/v1/models", KEY) == 200
        try:
            rec = dflash_smoke.smoke_instance(f"http://127.0.0.1:{PORT}", args, api_key=KEY, timeout=120)
            checks["smoke_with_key"] = bool(rec.get("speculative"))
        except dflash_smoke.SmokeError as exc:
            checks["smoke_with_key"] = False
            checks["smoke_error"] = str(exc)
        pids = server_pids(srv.p.pid)
        checks["processes"] = len(pids)
        checks["key_on_no_cmdline"] = all(KEY.encode() not in read(f"/proc/{p}/cmdline") for p in pids)
        checks["key_in_no_child_environ"] = all(b"DFLASH_API_KEY=" not in read(f"/proc/{p}/environ")
                                                for p in pids if p != srv.p.pid)
    finally:
        srv.stop()
    with open(srv.log_path, errors="replace") as fh:
        log = fh.read()
    checks["key_not_in_log"] = KEY not in log
    checks["server_args_masked"] = "api_key='********'" in log
    ok = all(v for k, v in checks.items() if k not in ("processes", "smoke_error"))
    summary = {"ok": ok, "checks": checks}
    print(json.dumps(summary, indent=1), flush=True)
    with open(os.path.join(smoke_real.OUT, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
