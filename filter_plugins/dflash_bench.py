"""Jinja filters over module_utils/dflash_bench/ (the benchmark role's cell records and progress)."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_bench import matrix as _mx
from ansible.module_utils.dflash_bench import results as _res
from ansible.module_utils.dflash_common.jinja import plain as _plain


def dflash_bench_progress(n, total, elapsed):
    """'cell 5 of 24, 1m10s elapsed, about 4m12s left' once cell n is done."""
    return _mx.progress(int(n), int(total), float(elapsed), done_cells=int(n))


def dflash_bench_api_key(args):
    """The --api-key of a command line, or '' (the cell module sends it as a Bearer token)."""
    return _res.api_key(_plain(args)) or ""


def dflash_bench_config_view(entry):
    return _res.config_view(_plain(entry))


def dflash_bench_plan_lines(plan, run, run_dir):
    """The plan as the play shows it: one line for the run, one per configuration (flags redacted)."""
    plan = _plain(plan)
    out = [(f"run {run}: release {plan['release']['id']}, base instance {plan['base']['name']}, "
           f"{len(plan['cells'])} cells in {len(plan['waves'])} wave(s); results: {run_dir}")]
    for c in plan["configurations"]:
        where = (f"running instance {c['running']}" if c.get("running")
                 else f"GPU {','.join(str(g) for g in c.get('gpus') or [])}, port {c.get('port')}")
        out.append(f"{c['name']} ({where}): python -m sglang.launch_server {' '.join(_res.redact_args(c['args']))}")
    return out


def dflash_bench_start_failures(results, late=False, wave=()):
    return _res.start_failures(_plain(results), bool(late), _plain(wave))


def dflash_bench_command_line(cmdline):
    """/proc/self/cmdline of ansible-playbook (NUL separated) -> 'ansible-playbook <its arguments>' (no
    interpreter path)."""
    words = [w for w in str(cmdline or "").split("\0") if w]
    for i, w in enumerate(words):
        if w.endswith("ansible-playbook") or w == "ansible.cli.playbook":
            return " ".join(["ansible-playbook"] + words[i + 1:])
    return ""


class FilterModule:
    def filters(self):
        return {
            "dflash_bench_progress": dflash_bench_progress,
            "dflash_bench_api_key": dflash_bench_api_key,
            "dflash_bench_config_view": dflash_bench_config_view,
            "dflash_bench_plan_lines": dflash_bench_plan_lines,
            "dflash_bench_start_failures": dflash_bench_start_failures,
            "dflash_bench_command_line": dflash_bench_command_line,
        }
