#!/usr/bin/python
"""Ansible module (controller): a tune run's choice, proposed inventory change and report."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_tune_report
short_description: Analyse a tune run, choose, propose the inventory change, render the report
description:
  - Reads the run folder (C(run.json), C(cells/*.json), C(rounds.jsonl)); every cell's figures with n and
    their interval; each configuration's deciding figure; the choice (the best goodput against the
    runner-up - no winner when the intervals overlap, speculation does not pay when no speculation wins).
  - A clear choice becomes a proposed change of the host's instance in the user's inventory - a unified diff
    (C(inventory.diff)) of the file that defines it, nothing written to the inventory; playbooks/tune-apply.yml
    deploys it as a release when asked.
  - Writes C(results.json), C(charts/*.png), C(report.md), C(report.tex) and, with pdflatex, C(report.pdf).
  - Run it delegated to localhost. Logic in C(module_utils/dflash_bench/tune_report.py), C(proposal.py).
options:
  run_dir: {description: The run folder., type: path, required: true}
  templates_dir: {description: The folder of report.md.j2 and report.tex.j2., type: path, required: true}
  pdf: {description: Compile report.tex when pdflatex is there., type: bool, default: true}
  host: {description: The host., type: str, required: true}
  groups: {description: The host's groups (where its variables may come from)., type: list, elements: str, default: []}
  inventory_sources: {description: The inventory sources of the run., type: list, elements: path, default: []}
  instances: {description: The host's dflash_instances., type: list, elements: raw, default: []}
  base_instance: {description: The release instance the configurations started from., type: str, required: true}
author: dflash-deploy
"""

RETURN = r"""
lines: {description: The choice, its interval, the proposal., type: list, returned: always}
choice: {description: "{verdict, text, best, runner_up, ratio, tied, ranking, speculative}", type: dict, returned: always}
proposal: {description: "{changed, file, diff, note}", type: dict, returned: always}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench import tune_report
from ansible.module_utils.dflash_bench.proposal import chosen, propose
from ansible.module_utils.dflash_bench.results import read_json


def main():
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "templates_dir": {"type": "path", "required": True},
            "pdf": {"type": "bool", "default": True},
            "host": {"type": "str", "required": True},
            "groups": {"type": "list", "elements": "str", "default": []},
            "inventory_sources": {"type": "list", "elements": "path", "default": []},
            "instances": {"type": "list", "elements": "raw", "default": []},
            "base_instance": {"type": "str", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    run_dir = os.path.normpath(p["run_dir"])
    try:
        model = tune_report.analyse(run_dir)
        choice = model["choice"]
        proposal = {"changed": False, "file": None, "diff": "", "snippet": "", "note": ""}
        cfg, why = chosen(read_json(os.path.join(run_dir, "run.json")), choice)
        if cfg is None:
            proposal["note"] = why
        else:
            rel_to = os.path.dirname(os.path.commonpath([os.path.abspath(s) for s in p["inventory_sources"]])) \
                if p["inventory_sources"] else None
            proposal = propose(p["inventory_sources"], p["host"], p["groups"], p["base_instance"], cfg, p["instances"],
                               rel_to=rel_to)
        out = tune_report.render(run_dir, p["templates_dir"], proposal=proposal, pdf=p["pdf"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"{run_dir}: cannot analyse the tune run: {exc}")
    lines = [f"report: {run_dir}/report.md" + (f" and {out['pdf']}" if out.get("pdf") else "")]
    if model["standin"]:
        lines.append(f"STAND-IN figures, not SGLang (the server says: {model['standin']})")
    if model["dummy"]:
        lines.append("DUMMY WEIGHTS: the base instance loads random weights (--load-format dummy)")
    lines += out["lines"]
    if proposal.get("diff"):
        lines += [f"proposed inventory change ({proposal['note']}), also in {run_dir}/inventory.diff:"]
        lines += proposal["diff"].splitlines()
    elif proposal.get("note"):
        lines.append(f"proposal: {proposal['note']}")
    if proposal.get("changed"):
        lines.append(f"to deploy it as a release (every gate of deploy.yml): {tune_report.apply_command(p['host'], run_dir)}")
    lines += [f"warning: {w}" for w in out["warnings"]]
    module.exit_json(changed=True, lines=lines, choice=out["summary"]["choice"],
                     proposal={k: proposal.get(k) for k in ("changed", "file", "diff", "note")})


if __name__ == "__main__":
    main()
