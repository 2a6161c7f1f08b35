#!/usr/bin/env python3
"""dflash-launch: start sglang (or another server entry point) with the instance's API keys, without argv,
and with every secret of the instance masked in what the server writes.

    ExecStart=<venv>/bin/python <prefix>/libexec/dflash-launch -m sglang.launch_server $DFLASH_ARGS
    ExecStart=<venv>/bin/python <prefix>/libexec/dflash-launch /path/to/other_server.py $DFLASH_ARGS

sglang 0.5.11 takes its API keys only from its argument parser (ServerArgs.api_key / admin_api_key:
--api-key, --admin-api-key; no environment variable). On the command line they would show in ps and
/proc/<pid>/cmdline to every local user. systemd reads DFLASH_API_KEY / DFLASH_ADMIN_API_KEY from the
instance's env file (0600, root); this launcher removes them from the environment (the server's children
do not inherit them), appends the flags to sys.argv inside this process (the kernel's copy of the command
line stays without them) and runs the server in the same process (it stays the unit's main process).

sglang logs its ServerArgs at start-up (``server_args=ServerArgs(..., api_key='...', ...)``), whatever started
it: sglang itself, a wrapper script, another server built on it. So the launcher masks the secrets in the
output itself, not in one repr: stdout and stderr (those of the server's children too, who inherit them) go
through pipes to a small filter process forked here, which writes them on to the journal (or the runner's log)
with every secret value replaced by ******** -- the API keys, and the values of the env file's credential
variables (HF_TOKEN, ..._API_KEY, ..._SECRET, ...), as written and as Python's repr or JSON writes them. A value
cut across two writes is held back until the rest arrives (only the longest tail that starts a secret). The
filter ignores SIGTERM/SIGINT/SIGHUP and ends when the server and its children have closed their output, so a
stop's last lines get through. Without any secret, nothing is forked. For ``-m sglang...`` the ServerArgs repr
is masked as well (it never reaches the pipe with the key).

An instance that runs another sglang version than its host (its own venv: the release's env file sets
DFLASH_PYTHON=<that venv>/bin/python) is started by the unit with the release's venv like every other; this
launcher then replaces itself with that interpreter running this same file (exec: the same process, the unit's
main PID), the variable removed first so that it happens once; the masking starts in that interpreter.

Stdlib only, any Python >= 3.8 (it runs under the release's venv, before sglang imports anything).
"""

import json
import os
import runpy
import select
import signal
import sys

KEYS = (("DFLASH_API_KEY", "--api-key"), ("DFLASH_ADMIN_API_KEY", "--admin-api-key"))
MASK = "********"
# The toolkit's rule for credential variables (module_utils/dflash_common/secrets.py is_secret_env), written
# again here: this file runs alone on the host, under the server's own Python, without the toolkit.
_SECRET_PARTS = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "APIKEY", "AUTH"}
_KEY_QUALIFIERS = {"API", "ACCESS", "PRIVATE", "SECRET", "SIGNING", "ENCRYPTION"}
# shorter values are not masked: "1" or "yes" would mask half the log
MIN_SECRET = 6


def is_secret_env(name):
    parts = str(name).upper().split("_")
    if any(p in _SECRET_PARTS for p in parts):
        return True
    return any(p == "KEY" and i > 0 and parts[i - 1] in _KEY_QUALIFIERS for i, p in enumerate(parts))


def take_keys(environ):
    """[(flag, value)] of the keys set in ``environ``; the variables are removed from it."""
    out = []
    for var, flag in KEYS:
        value = environ.pop(var, None)
        if value:
            out.append((flag, value))
    return out


def secret_values(keys, environ):
    """The API keys taken and the values of the credential variables of ``environ``."""
    values = [v for _flag, v in keys]
    values += [v for k, v in environ.items() if is_secret_env(k) and len(v or "") >= MIN_SECRET]
    return sorted({v for v in values if v and len(v) >= MIN_SECRET})


def forms_of(values):
    """Each value as bytes the way a log may carry it: as is, inside Python's repr, inside JSON; longest first."""
    forms = set()
    for v in values:
        for text in (v, repr(v)[1:-1], json.dumps(v)[1:-1]):
            if text:
                forms.add(text.encode("utf-8", "backslashreplace"))
    return sorted(forms, key=len, reverse=True)


def mask_bytes(data, forms):
    for f in forms:
        data = data.replace(f, MASK.encode())
    return data


def held_tail(data, forms):
    """How many bytes at the end of ``data`` could be the start of a secret (held back until more arrives)."""
    best = 0
    for f in forms:
        for k in range(min(len(f) - 1, len(data)), best, -1):
            if data.endswith(f[:k]):
                best = k
                break
    return best


def _write_all(fd, data):
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return  # the journal went away: nothing left to write to
        data = data[n:]


def filter_loop(sources, forms):
    """Copy each pipe in ``sources`` ({read fd: output fd}) to its output with ``forms`` masked, until every
    pipe is closed."""
    held = {r: b"" for r in sources}
    while held:
        ready, _w, _x = select.select(list(held), [], [])
        for r in ready:
            chunk = os.read(r, 65536)
            if not chunk:
                _write_all(sources[r], mask_bytes(held.pop(r), forms))
                os.close(r)
                continue
            data = mask_bytes(held[r] + chunk, forms)
            keep = held_tail(data, forms)
            held[r] = data[len(data) - keep:] if keep else b""
            _write_all(sources[r], data[:len(data) - keep])


def mask_output(values):
    """Route stdout and stderr through a forked filter that masks ``values``. Returns its pid (None: no secret)."""
    forms = forms_of(values)
    if not forms:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pipes = [(fd,) + os.pipe() for fd in (1, 2)]
    pid = os.fork()
    if pid == 0:  # the filter: it keeps the original outputs, reads the pipes
        code = 0
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            for _fd, _r, w in pipes:
                os.close(w)
            filter_loop({r: fd for fd, r, _w in pipes}, forms)
        except BaseException:  # noqa: BLE001 - the filter must never take the server's output down with a traceback
            code = 1
        finally:
            os._exit(code)
    for fd, r, w in pipes:  # the server: its outputs are the pipes' write ends
        os.close(r)
        os.dup2(w, fd)
        os.close(w)
    return pid


def mask_repr(cls, values):
    """Wrap ``cls.__repr__`` so that none of ``values`` shows in it."""
    original = cls.__repr__

    def masked(self):
        text = original(self)
        for v in values:
            text = text.replace(v, MASK)
        return text

    cls.__repr__ = masked


def mask_sglang(values):
    if not values:
        return
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:  # noqa: BLE001 - sglang reports its own import errors when it starts
        return
    mask_repr(ServerArgs, values)


def reexec_target(environ, argv, script):
    """The argv to exec when DFLASH_PYTHON names the instance's own interpreter (the variable is removed from
    ``environ``), else None."""
    python = environ.pop("DFLASH_PYTHON", None)
    if not python:
        return None
    return [python, script] + list(argv)


def main(argv):
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        sys.stderr.write("usage: dflash-launch (-m MODULE | SCRIPT) [ARGS...]\n")
        return 2
    target = reexec_target(os.environ, argv, os.path.abspath(__file__))
    if target:
        os.execv(target[0], target)
    keys = take_keys(os.environ)
    extra = [x for pair in keys for x in pair]
    mask_output(secret_values(keys, os.environ))
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        sys.argv = [module] + rest + extra
        if module.startswith("sglang"):
            mask_sglang([v for _, v in keys])
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [argv[0]] + argv[1:] + extra
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
