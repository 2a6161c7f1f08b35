"""The runner backend: rendered systemd service units run on hosts without systemd (GPU containers often lack it).

Does what systemd does for our instance units, no more: [Service] EnvironmentFile= (a leading '-'
makes it optional), Environment=, WorkingDirectory=, ExecStart= with $VAR (split into words) and
${VAR} (one word) expanded as systemd does; the process starts in its own session with stdout and
stderr appended to a log file, its pid in a pidfile. Hardening, User= and Restart= are NOT emulated.
Pure functions plus small process helpers; no Ansible import (library/dflash_service.py, the activation, the wait,
the router and scripts/unit_runner.py use it, through ``Runner``, the service interface of ``systemd.Systemd``).
"""

import os
import re
import shlex
import signal
import subprocess
import time

START_MARK = "-- dflash-runner: starting "


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


# systemd specifiers for system units (systemd.unit(5), "Specifiers")
SPECIFIER_DIRS = {"C": "/var/cache", "S": "/var/lib", "L": "/var/log", "t": "/run", "T": "/tmp", "V": "/var/tmp",
                  "E": "/etc"}
DIRECTORY_KEYS = {"CacheDirectory": "/var/cache", "StateDirectory": "/var/lib", "LogsDirectory": "/var/log",
                  "RuntimeDirectory": "/run", "ConfigurationDirectory": "/etc"}


def expand_specifiers(value, unit_name=""):
    """%C %S %L %t %T %V %E %n %N %p %i %% as systemd expands them for a system unit."""
    stem = unit_name.rsplit(".", 1)[0]
    prefix, _, instance = stem.partition("@")
    table = dict(SPECIFIER_DIRS, n=unit_name, N=stem, p=prefix, i=instance, h="/root")

    def sub(m):
        key = m.group(1)
        if key == "%":
            return "%"
        if key not in table:
            raise ValueError(f"unsupported specifier %{key} in {value!r}")
        return table[key]

    return re.sub(r"%(.)", sub, value)


def resolve(unit_text, base_env=None, unit_name=""):
    sections = parse_unit(unit_text)
    service = sections.get("Service", [])
    env = dict(base_env or {})
    workdir, execs, dirs = None, [], []
    for k, v in service:
        v = expand_specifiers(v, unit_name)
        if k in DIRECTORY_KEYS:
            dirs += [os.path.join(DIRECTORY_KEYS[k], d) for d in v.split()]
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
    return {"argv": expand_exec(execs[0], env), "env": env, "workdir": workdir, "directories": dirs}


def start(unit_path, log_path, pidfile, base_env=None):
    """Start the unit's ExecStart in a new session; append output to log_path; return the pid."""
    for d in (os.path.dirname(os.path.abspath(log_path)), os.path.dirname(os.path.abspath(pidfile))):
        os.makedirs(d, exist_ok=True)
    name = os.path.basename(unit_path)
    with open(log_path, "ab", buffering=0) as log:
        try:
            with open(unit_path, encoding="utf-8") as fh:
                r = resolve(fh.read(), dict(os.environ) if base_env is None else base_env, name)
            for d in r["directories"]:  # what systemd creates for CacheDirectory= and friends
                os.makedirs(d, mode=0o750, exist_ok=True)
        except (OSError, ValueError) as exc:
            log.write(f"{START_MARK}{name} at {time.time():.3f}: (not started)\n"
                      f"dflash-runner: cannot start {name}: {exc}\n".encode())
            raise
        log.write(f"{START_MARK}{name} at {time.time():.3f}: {shlex.join(r['argv'])}\n".encode())
        p = subprocess.Popen(r["argv"], env=r["env"], cwd=r["workdir"] or None, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(pidfile, "w", encoding="utf-8") as fh:
        fh.write(str(p.pid))
    return p.pid


def alive(pid):
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie counts as stopped
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def read_pid(pidfile):
    try:
        with open(pidfile, encoding="utf-8") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def stop(pidfile, timeout=30.0):
    """SIGTERM the unit's process group, SIGKILL after timeout. Returns True if something ran."""
    pid = read_pid(pidfile)
    ran = alive(pid)
    if pid is not None and group_alive(pid):
        # the whole process group (sglang's scheduler and detokenizer children too), as systemd's
        # KillMode=control-group would: their GPU memory is only free once they are all gone
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.time() + timeout
        while time.time() < deadline and group_alive(pid):
            time.sleep(0.2)
        if group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
            end = time.time() + 10
            while time.time() < end and group_alive(pid):
                time.sleep(0.1)
    if pid is not None:  # stopped on purpose: inactive, not failed
        os.remove(pidfile)
    return ran


def group_alive(pgid):
    """Is any live (non-zombie) process left in the process group?"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as fh:
                fields = fh.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def started_at(pid, proc="/proc"):
    """(ActiveEnterTimestamp, ActiveEnterTimestampMonotonic) of a runner-managed process, as systemd shows them:
    its start in the host's local time, and in microseconds since boot (``/proc/<pid>/stat`` starttime, exact:
    two reads of one process agree, a restart changes it). ("", 0) when it cannot be read."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8") as fh:
            ticks = int(fh.read().rpartition(")")[2].split()[19])  # field 22: starttime, clock ticks after boot
        with open(os.path.join(proc, "uptime"), encoding="utf-8") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return "", 0
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    when = time.localtime(time.time() - (uptime - since_boot))
    return time.strftime("%a %Y-%m-%d %H:%M:%S %Z", when), int(since_boot * 1_000_000)


def show(pidfile):
    """A `systemctl show`-like view of a runner-managed unit (no restarts: Restart= is not emulated)."""
    pid = read_pid(pidfile)
    if pid is None:
        return {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "NRestarts": 0}
    if alive(pid):
        text, mono = started_at(pid)
        return {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "NRestarts": 0,
                "ExecMainPID": pid, "ActiveEnterTimestamp": text, "ActiveEnterTimestampMonotonic": mono}
    return {"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed", "NRestarts": 0,
            "ExecMainPID": pid}


def log_since_last_start(text):
    """The part of a runner log written since the last start (what journalctl --since would give)."""
    i = text.rfind(START_MARK)
    return text if i < 0 else text[i:]


def log_tail(log, max_bytes=256 * 1024):
    """The last ``max_bytes`` of a log file ("" when it cannot be read)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as fh:
            fh.seek(max(0, os.path.getsize(log) - max_bytes))
            return fh.read()
    except OSError:
        return ""


class Runner:
    """The runner's units as a service manager (hosts without systemd, dflash_service_manager=runner), with the
    interface of ``systemd.Systemd``: <unit_dir>/<unit> rendered as for systemd, its log <log_dir>/<unit>.log
    (the journal's stand-in), its pidfile <run_dir>/<unit>.pid. Nothing to reload or enable: there is no boot
    to start units at; User=, sandboxing and Restart= are not applied (NOT_EMULATED)."""

    name = "runner"
    log_lags = False  # the log file is written by the process itself: complete when it is gone

    def __init__(self, unit_dir="/etc/systemd/system", log_dir="/var/log/dflash", run_dir="/run/dflash"):
        self.unit_dir, self.log_dir, self.run_dir = unit_dir, log_dir, run_dir

    def paths(self, unit):
        """-> (unit file, log file, pidfile)"""
        return (os.path.join(self.unit_dir, unit), os.path.join(self.log_dir, unit + ".log"),
                os.path.join(self.run_dir, unit + ".pid"))

    def reload(self):
        pass

    def enable(self, units):
        pass

    def disable(self, units):
        pass

    def reset_failed(self, units):
        pass

    def stop(self, units):
        for unit in units or []:
            stop(self.paths(unit)[2])

    def _start(self, units, restart):
        errors = []
        for unit in units or []:
            path, log, pidfile = self.paths(unit)
            if restart:
                stop(pidfile)
            elif alive(read_pid(pidfile)):
                continue
            try:
                start(path, log, pidfile)
            except (OSError, ValueError, KeyError) as exc:
                errors.append(f"{unit}: {exc}")
        return {"rc": 1 if errors else 0, "stderr": "; ".join(errors), "backend": "runner"}

    def start(self, units) -> dict:
        """Start the units not running."""
        return self._start(units, restart=False)

    def restart(self, units) -> dict:
        return self._start(units, restart=True)

    def state(self, unit) -> dict:
        """``show`` of its pidfile; LoadState ``not-found`` without its unit file."""
        path, _log, pidfile = self.paths(unit)
        if not os.path.exists(path):
            return {"LoadState": "not-found"}
        return show(pidfile)

    def is_active(self, unit) -> bool:
        """Its process runs (whether or not its unit file is still there)."""
        return show(self.paths(unit)[2]).get("ActiveState") == "active"

    def is_enabled(self, unit) -> bool:
        return False

    def logs(self, unit, since=None, lines=5000, max_bytes=256 * 1024) -> str:
        """Its log file, newest ``lines`` lines of the last ``max_bytes``; with ``since`` only what its last start
        wrote (the restart a caller waits on came after ``since``)."""
        text = log_tail(self.paths(unit)[1], max_bytes)
        if since is not None:
            text = log_since_last_start(text)
        return "\n".join(text.splitlines()[-int(lines):]) + ("\n" if text.endswith("\n") else "")

    def has_logs(self) -> bool:
        return True

    def last_log_at(self, unit, since) -> float:
        """When its log file was last written (``since`` when not since then, or when there is none)."""
        try:
            return max(since, os.path.getmtime(self.paths(unit)[1]))
        except OSError:
            return since

    def log_source(self, unit) -> str:
        return self.paths(unit)[1]
