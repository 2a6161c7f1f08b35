"""Jinja filters of tune.yml (the bench stage's tune entry point) over module_utils/dflash_bench/."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_bench import matrix as _mx
from ansible.module_utils.dflash_bench import prompts as _pr
from ansible.module_utils.dflash_bench import proposal as _prop
from ansible.module_utils.dflash_bench import results as _res
from ansible.module_utils.dflash_bench import tune as _tune
from ansible.module_utils.dflash_common.jinja import plain as _plain


def dflash_bench_tune_prompts(spec, max_tokens=256, limit=200, seed=0, host="host"):
    """dflash_bench_tune_prompts -> {prompts, text (what the report says), errors}. A built-in set's name, or a
    JSONL file on the controller (a relative path from where ansible-playbook runs)."""
    spec = str(spec or "")
    try:
        if spec in _pr.BUILTIN:
            info = _pr.builtin(spec, int(max_tokens), seed=int(seed))
        else:
            path = os.path.abspath(os.path.expanduser(spec))
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                return {"prompts": [], "text": "", "errors": [
                    (f"{host}: dflash_bench_tune_prompts: {spec!r} is neither a built-in set ({', '.join(_pr.BUILTIN)}) "
                    f"nor a readable file ({exc.strerror})")]}
            info = _pr.parse_jsonl(text, spec, int(max_tokens), int(limit), int(seed))
    except _pr.PromptsError as exc:
        return {"prompts": [], "text": "", "errors": [f"{host}: dflash_bench_tune_prompts: {e}" for e in exc.errors]}
    return {"prompts": info["prompts"], "text": _pr.describe(info), "errors": []}


def dflash_bench_tune_errors(opts, host="host"):
    return _tune.check(_plain(opts), str(host))


def dflash_bench_tune_matrix(configurations, sweep, backends, env):
    """(configurations, sweep) for the bench plan: the backends crossed in, the server env added."""
    configs, sw = _tune.with_backends(_plain(configurations), _plain(sweep), _plain(backends) or [])
    return {"configurations": _tune.with_env(configs, _plain(env) or {}), "sweep": sw}


def dflash_bench_tune_loads(rates, concurrency, requests, cell_seconds):
    return _tune.load_points(_plain(rates) if isinstance(_plain(rates), list) else [], _plain(concurrency),
                             int(requests), int(cell_seconds))


def dflash_bench_tune_servers(wave, failed):
    """The wave's servers that came up, as the round module takes them ({name, base_url})."""
    failed = _plain(failed) or {}
    return [{"name": c["name"], "base_url": c["base_url"]} for c in _plain(wave) if c["name"] not in failed]


def dflash_bench_tune_api_keys(wave):
    """{configuration: its --api-key} of the wave's servers that have one (the round module's no_log option)."""
    return {c["name"]: k for c in _plain(wave) if (k := _res.api_key(c.get("args")))}


def dflash_bench_tune_progress(seconds):
    return _mx.fmt_seconds(seconds)


def dflash_bench_tune_apply(run_dir, host, instances, current_release=None):
    """playbooks/tune-apply.yml: {errors, instances (the host's dflash_instances running the run's choice), lines}.
    The run folder is on the controller (a relative path from where ansible-playbook runs)."""
    path = os.path.abspath(os.path.expanduser(str(run_dir or "")))
    return _prop.apply_plan(path, str(host), _plain(instances) or [], current_release or None)


class FilterModule:
    def filters(self):
        return {
            "dflash_bench_tune_prompts": dflash_bench_tune_prompts,
            "dflash_bench_tune_errors": dflash_bench_tune_errors,
            "dflash_bench_tune_matrix": dflash_bench_tune_matrix,
            "dflash_bench_tune_loads": dflash_bench_tune_loads,
            "dflash_bench_tune_servers": dflash_bench_tune_servers,
            "dflash_bench_tune_api_keys": dflash_bench_tune_api_keys,
            "dflash_bench_tune_progress": dflash_bench_tune_progress,
            "dflash_bench_tune_apply": dflash_bench_tune_apply,
        }
