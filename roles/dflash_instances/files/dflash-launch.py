#!/usr/bin/env python3
"""dflash-launch: start sglang (or another server entry point) with the instance's API keys, without argv.

    ExecStart=<venv>/bin/python <prefix>/libexec/dflash-launch -m sglang.launch_server $DFLASH_ARGS
    ExecStart=<venv>/bin/python <prefix>/libexec/dflash-launch /path/to/other_server.py $DFLASH_ARGS

sglang 0.5.11 takes its API keys only from its argument parser (ServerArgs.api_key / admin_api_key:
--api-key, --admin-api-key; no environment variable). On the command line they would show in ps and
/proc/<pid>/cmdline to every local user. systemd reads DFLASH_API_KEY / DFLASH_ADMIN_API_KEY from the
instance's env file (0600, root); this launcher removes them from the environment (the server's children
do not inherit them), appends the flags to sys.argv inside this process (the kernel's copy of the command
line stays without them) and runs the server in the same process. sglang logs its ServerArgs at start-up
(entrypoints/engine.py: logger.info(f"{server_args=}")): the keys are masked in that repr.

An instance that runs another sglang version than its host (its own venv: the release's env file sets
DFLASH_PYTHON=<that venv>/bin/python) is started by the unit with the release's venv like every other; this
launcher then replaces itself with that interpreter running this same file (exec: the same process, the unit's
main PID), the variable removed first so that it happens once.
Stdlib only, any Python >= 3.8.
"""

import os
import runpy
import sys

KEYS = (("DFLASH_API_KEY", "--api-key"), ("DFLASH_ADMIN_API_KEY", "--admin-api-key"))
MASK = "********"


def take_keys(environ):
    """[(flag, value)] of the keys set in ``environ``; the variables are removed from it."""
    out = []
    for var, flag in KEYS:
        value = environ.pop(var, None)
        if value:
            out.append((flag, value))
    return out


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
