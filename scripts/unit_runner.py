#!/usr/bin/env python3
"""Run a rendered systemd service unit on a host without systemd (GPU containers often lack it).

It does what systemd would do for our instance units, no more: read [Service] EnvironmentFile=,
Environment=, WorkingDirectory=, ExecStart=; expand $VAR (split into words) and ${VAR} (one word)
as systemd does; start the command in a new session with stdout+stderr appended to a log file;
record the pid. Hardening, User= and restart policy are not emulated: say so where it matters.

  unit_runner.py start  UNIT_FILE --log FILE --pidfile FILE [--print]
  unit_runner.py stop   --pidfile FILE [--timeout S]
  unit_runner.py status --pidfile FILE          (exit 0 running, 3 stopped)
  unit_runner.py show   UNIT_FILE               (print argv and environment as JSON)
"""
import argparse
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time


def parse_unit(text):
    """Return {section: [(key, value), ...]} keeping repeated keys in order; joins '\\' continuations."""
    sections, cur, pending = {}, None, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = line[1:-1]
            sections.setdefault(cur, [])
        elif "=" in line and cur is not None:
            k, v = line.split("=", 1)
            sections[cur].append((k.strip(), v.strip()))
    return sections


def parse_env_file(text):
    """systemd EnvironmentFile syntax: KEY=VALUE lines, '#'/';' comments, optional quotes."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        k, v = line.split("=", 1)
        k, v = k.strip(), v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            q, v = v[0], v[1:-1]
            if q == '"':
                v = re.sub(r'\\(["\\$`])', r"\1", v)
        env[k] = v
    return env


def parse_environment_assignments(value):
    """Environment="A=1" "B=two words" C=3 -> dict."""
    out = {}
    for word in shlex.split(value):
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def expand_exec(value, env):
    """Split ExecStart like systemd: $VAR -> split words, ${VAR} -> one word; strip -@+! prefixes."""
    value = value.lstrip("-@+!:")
    argv = []
    for word in shlex.split(value):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            argv.extend(env.get(m.group(1), "").split())
            continue
        word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda mm: env.get(mm.group(1), ""), word)
        argv.append(word.replace("%%", "%"))
    return argv


def resolve(unit_text, base_env=None):
    sections = parse_unit(unit_text)
    service = sections.get("Service", [])
    env = dict(base_env or {})
    workdir, execs = None, []
    for k, v in service:
        if k == "Environment":
            env.update(parse_environment_assignments(v))
        elif k == "EnvironmentFile":
            optional = v.startswith("-")
            path = v.lstrip("-")
            try:
                with open(path) as fh:
                    env.update(parse_env_file(fh.read()))
            except FileNotFoundError:
                if not optional:
                    raise
        elif k == "WorkingDirectory":
            workdir = v.lstrip("-")
        elif k == "ExecStart":
            execs.append(v)
    if len(execs) != 1:
        raise ValueError(f"expected one ExecStart, found {len(execs)}")
    return {"argv": expand_exec(execs[0], env), "env": env, "workdir": workdir}


def cmd_start(a):
    with open(a.unit) as fh:
        r = resolve(fh.read(), dict(os.environ))
    if a.print:
        print(json.dumps({"argv": r["argv"]}))
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    with open(a.log, "ab", buffering=0) as log:
        log.write(f"-- unit_runner: starting {os.path.basename(a.unit)} at {time.strftime('%Y-%m-%dT%H:%M:%S')}: "
                  f"{shlex.join(r['argv'])}\n".encode())
        p = subprocess.Popen(r["argv"], env=r["env"], cwd=r["workdir"] or None, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(a.pidfile, "w") as fh:
        fh.write(str(p.pid))
    print(p.pid)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie counts as stopped
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _pid(pidfile):
    try:
        with open(pidfile) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def cmd_stop(a):
    pid = _pid(a.pidfile)
    if pid is None or not _alive(pid):
        print("stopped")
        return
    os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + a.timeout
    while time.time() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
    print("stopped")


def cmd_status(a):
    pid = _pid(a.pidfile)
    running = pid is not None and _alive(pid)
    print(json.dumps({"pid": pid, "running": running}))
    sys.exit(0 if running else 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("unit")
    s.add_argument("--log", required=True)
    s.add_argument("--pidfile", required=True)
    s.add_argument("--print", action="store_true")
    s.set_defaults(fn=cmd_start)
    s = sub.add_parser("stop")
    s.add_argument("--pidfile", required=True)
    s.add_argument("--timeout", type=float, default=30)
    s.set_defaults(fn=cmd_stop)
    s = sub.add_parser("status")
    s.add_argument("--pidfile", required=True)
    s.set_defaults(fn=cmd_status)
    s = sub.add_parser("show")
    s.add_argument("unit")
    s.set_defaults(fn=lambda a: print(json.dumps(resolve(pathlib.Path(a.unit).read_text()), indent=1)))
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
