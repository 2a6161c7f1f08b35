#!/usr/bin/python
"""Ansible module: plan a benchmark run against the host's deployed release (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_plan
short_description: Plan a benchmark run against the deployed release (changes nothing)
description:
  - Reads C(<prefix>/current/manifest.json) (the deployed release), expands and checks the declared
    configurations, picks the base instance, free GPUs and free ports (listening sockets from /proc),
    reads the drafts' block sizes, and derives each temporary instance's command line and env file.
  - Every error of the host at once (host, configuration and field named), before anything starts.
  - Also lists benchmark servers left over by an interrupted run (runtime units, runner pidfiles).
  - Logic in C(module_utils/dflash_bench/plan.py), C(dflash_bench/matrix.py), C(dflash_bench/flags.py).
options:
  prefix: {description: Install prefix., type: path, default: /opt/dflash}
  configurations: {description: Declared configurations., type: list, elements: raw, default: []}
  sweep: {description: "Cross product of axes (algorithm, budget, topk, mode, attention_backend, tp).", type: dict,
          default: {}}
  workloads: {description: Workload names., type: list, elements: str, required: true}
  concurrency: {description: Concurrency levels., type: list, elements: int, required: true}
  repeats: {description: "How many times each cell is measured (1 to 20; the report gives the median and the spread).", type: int, default: 1}
  base_instance: {description: Release instance whose flags are the base (default the first speculative)., type: str}
  gpus: {description: GPUs the temporary instances may use (default the free ones)., type: list, elements: int,
         default: []}
  allow_busy_gpus: {description: Allow GPUs that run something (one GPU shared by several servers)., type: bool,
                    default: false}
  port_range: {description: "[low, high] ports to pick from.", type: list, elements: int, default: [30100, 30199]}
  parallel: {description: Configurations started together., type: int, default: 1}
  extra_args: {description: Arguments added to every temporary instance., type: list, elements: str, default: []}
  start_timeout: {description: Seconds a wave may take to become healthy., type: int, default: 300}
  cell_timeout: {description: Seconds per cell., type: int, default: 120}
  fingerprint: {description: The dflash_fingerprint fact (free GPUs)., type: dict, default: {}}
  host: {description: Host name for messages., type: str, default: ''}
  runtime_unit_dir: {description: Where temporary systemd units go., type: path, default: /run/systemd/system}
  run_dir: {description: Pidfiles of runner-managed units., type: path, default: /run/dflash}
author: dflash-deploy
"""

RETURN = r"""
plan: {description: "release, base, gpu_pool, configurations, waves, cells, lifetime_s", type: dict, returned: success}
leftovers: {description: Benchmark units of an earlier, interrupted run., type: list, returned: always}
"""

import glob
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.matrix import MatrixError, normalize
from ansible.module_utils.dflash_bench.plan import plan
from ansible.module_utils.dflash_common.argv import get_flag
from ansible.module_utils.dflash_instances.host import gather_host_facts
from ansible.module_utils.dflash_release.journal import current_target as current_id


def main():
    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "default": "/opt/dflash"},
            "configurations": {"type": "list", "elements": "raw", "default": []},
            "sweep": {"type": "dict", "default": {}},
            "workloads": {"type": "list", "elements": "str", "required": True},
            "concurrency": {"type": "list", "elements": "int", "required": True},
            "repeats": {"type": "int", "default": 1},
            "base_instance": {"type": "str"},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "allow_busy_gpus": {"type": "bool", "default": False},
            "port_range": {"type": "list", "elements": "int", "default": [30100, 30199]},
            "parallel": {"type": "int", "default": 1},
            "extra_args": {"type": "list", "elements": "str", "default": []},
            "start_timeout": {"type": "int", "default": 300},
            "cell_timeout": {"type": "int", "default": 120},
            "fingerprint": {"type": "dict", "default": {}},
            "host": {"type": "str", "default": ""},
            "runtime_unit_dir": {"type": "path", "default": "/run/systemd/system"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
        },
        supports_check_mode=True,
    )
    p = module.params
    host = p["host"] or "host"
    leftovers = sorted({os.path.basename(f) for f in glob.glob(os.path.join(p["runtime_unit_dir"], "dflash-bench-*.service"))}
                       | {os.path.basename(f)[:-4] for f in glob.glob(os.path.join(p["run_dir"], "dflash-bench-*.pid"))})
    rid = current_id(p["prefix"])
    if not rid:
        module.fail_json(msg=f"{host}: no deployed release ({p['prefix']}/current is missing): run deploy.yml first",
                         leftovers=leftovers)
    release_path = os.path.realpath(os.path.join(p["prefix"], "current"))
    try:
        with open(os.path.join(release_path, "manifest.json"), encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"{host}: release {rid}: manifest.json unreadable: {exc}", leftovers=leftovers)
    # every error at once: the configurations that are well formed are planned (GPUs, ports, draft blocks)
    # and their errors reported together with the malformed ones'
    configs, errors = normalize(p["configurations"], p["sweep"], host, lenient=True)
    drafts = {c["draft_model_path"] for c in configs if c.get("draft_model_path")}
    for inst in (manifest.get("instances") or {}).values():
        d = get_flag([str(a) for a in inst.get("args") or []], "--speculative-draft-model-path")
        if isinstance(d, str):
            drafts.add(d)
    facts = gather_host_facts([{"draft_model_path": d} for d in sorted(drafts)])
    opts = {k: p[k] for k in ("base_instance", "gpus", "allow_busy_gpus", "port_range", "parallel", "extra_args",
                              "workloads", "concurrency", "repeats", "start_timeout", "cell_timeout")}
    try:
        result = plan(host, manifest, release_path, configs, p["fingerprint"], facts["listeners"], facts["drafts"],
                      opts) if configs else None
    except MatrixError as exc:
        errors += exc.errors
    if errors or result is None:
        errors = errors or [f"{host}: dflash_bench_configurations: no configuration to benchmark"]
        module.fail_json(msg="; ".join(errors), errors=errors, leftovers=leftovers)
    module.exit_json(changed=False, plan=result, leftovers=leftovers)


if __name__ == "__main__":
    main()
