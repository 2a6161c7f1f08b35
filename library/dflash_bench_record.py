#!/usr/bin/python
"""Ansible module (controller): write the cell records of one wave of a benchmark run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_record
short_description: Write a wave's benchmark cell records into the run folder
description:
  - One C(cells/<cell>.json) per cell of the wave - the configuration (flags redacted), workload,
    concurrency, status and figures with every request; a server that did not come up gives each of
    its cells its cause and diagnosis; cells not measured before the deadline are recorded as skipped.
  - Run it delegated to localhost. Logic in C(module_utils/dflash_bench/results.py).
options:
  run_dir: {description: The run folder., type: path, required: true}
  meta: {description: "The run's {run, host, release_id, fingerprint_digest}.", type: dict,
         required: true}
  configs: {description: Planned configurations by name., type: dict, required: true}
  cells: {description: The wave's planned cells., type: list, elements: dict, required: true}
  measured: {description: The dflash_bench_measure loop results of the wave., type: list, elements: dict,
             default: []}
  failures: {description: "{configuration: {stage, status, msg, diagnosis}} of servers that did not come up.",
             type: dict, default: {}}
author: dflash-deploy
"""

RETURN = r"""
lines: {description: One line per cell (status, tok/s, accept length or cause)., type: list, returned: always}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.results import wave_records, write_text


def main():
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "meta": {"type": "dict", "required": True},
            "configs": {"type": "dict", "required": True},
            "cells": {"type": "list", "elements": "dict", "required": True},
            "measured": {"type": "list", "elements": "dict", "default": []},
            "failures": {"type": "dict", "default": {}},
        },
        supports_check_mode=False,
    )
    p = module.params
    lines = []
    for rec in wave_records(p["meta"], p["configs"], p["cells"], p["measured"], p["failures"]):
        write_text(os.path.join(p["run_dir"], "cells", rec["cell"] + ".json"), json.dumps(rec, indent=1) + "\n")
        s = rec.get("summary") or {}
        fig = (f"{s['output_tok_s']} tok/s, accept {s.get('accept_length')}" if s.get("output_tok_s")
               else (rec.get("error") or "")[:200])
        lines.append(f"{rec['cell']}: {rec['status']}: {fig}")
    module.exit_json(changed=bool(lines), lines=lines)


if __name__ == "__main__":
    main()
