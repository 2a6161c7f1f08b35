"""Shared by gpu-harness/e2e_fail.py and e2e_bench.py: start extra sglang servers from the DEPLOYED
release (its venv, its tree, its instance env), in their own sessions, logs under --out."""
import http.client
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
from ansible.module_utils.dflash_service import runner as dflash_runner

sys.path.insert(0, str(ROOT / "gpu-harness"))
import stop_servers

CURRENT = pathlib.Path(os.environ.get("DFLASH_CURRENT", "/opt/dflash/current"))  # overridable for a CPU dry run


def deployed_instance():
    """(name, env, args) of the first instance of the current release."""
    env_file = min((CURRENT / "instances").glob("*.env"))
    env = dict(os.environ)
    env.update(dflash_runner.parse_env_file(env_file.read_text()))
    return env_file.stem, env, env["DFLASH_ARGS"].split()


def set_flag(args, flag, value=None):
    """Return args with flag set to value (None: a switch), replacing an existing one."""
    out, i = [], 0
    while i < len(args):
        if args[i] == flag:
            i += 1
            if i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        out.append(args[i])
        i += 1
    return out + ([flag] if value is None else [flag, str(value)])


def drop_speculative(args):
    out, i = [], 0
    while i < len(args):
        if args[i].startswith("--speculative-"):
            i += 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(args[i])
        i += 1
    return out


class Server:
    def __init__(self, name, args, env, out):
        self.name, self.args, self.env = name, args, env
        self.log = pathlib.Path(out) / f"{name}.server.log"
        self.port = int(args[args.index("--port") + 1])
        self.t0 = self.proc = self.healthy_s = None

    def start(self):
        argv = [str(CURRENT / "venv" / "bin" / "python"), "-m", "sglang.launch_server", *self.args]
        with open(self.log, "wb") as fh:
            fh.write(f"CMD: {shlex.join(argv)}\n".encode())
            self.t0 = time.time()
            self.proc = subprocess.Popen(argv, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        stop_servers.register(self.proc.pid, f"e2e-{self.name}")
        return self

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_allocated(self, timeout=120):
        """Stagger starts: sglang sizes its KV cache from free memory at start-up."""
        end = time.time() + timeout
        while time.time() < end and self.proc.poll() is None:
            if "KV Cache is allocated" in self.text():
                return True
            time.sleep(1)
        return False

    def health(self):
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5).status
        except (OSError, http.client.HTTPException):  # not answering HTTP yet (ddtree_servers.HTTP_ERRORS)
            return None

    def wait_healthy(self, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            if self.health() == 200:
                self.healthy_s = round(time.time() - self.t0, 1)
                return True
            time.sleep(0.5)
        return False

    def stop(self):
        """Stop the server's whole process group and wait until its GPU memory is free."""
        if self.proc is None:
            return
        pidfile = self.log.with_suffix(".pid")
        pidfile.write_text(str(self.proc.pid))
        dflash_runner.stop(str(pidfile), timeout=30)
        self.proc.poll()
        stop_servers.unregister(f"e2e-{self.name}")


def post(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=timeout).read())
