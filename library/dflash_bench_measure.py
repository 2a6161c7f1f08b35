#!/usr/bin/python
"""Ansible module: measure the cells of one server (workloads x concurrency levels) on the host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_measure
short_description: Measure the benchmark cells of one server on this host
description:
  - For each cell (a workload at a concurrency level), one after the other, sends the workload's requests
    (streamed SGLang C(/generate), greedy, ignore_eos) with closed-loop workers to O(base_url) and returns
    the cell's figures (output tok/s, TTFT/ITL/latency percentiles, accept length and verify steps from the
    server's meta_info) with every request's record and the server's C(/metrics) and C(/get_server_info)
    before and after.
  - Bounded - O(timeout) seconds per cell; no cell starts once O(deadline) seconds have passed (it is
    returned as skipped).
  - Runs on the host, against loopback - the figures do not include the controller's network.
  - Logic in C(module_utils/dflash_bench/client.py); stdlib only.
options:
  base_url: {description: The server (e.g. http://127.0.0.1:30101)., type: str, required: true}
  cells:
    description: "The cells, in order - {id, workload (seeds, random or agent), concurrency} (other keys are
      ignored: the plan's cells are passed as they are)."
    type: list
    elements: dict
    required: true
  timeout: {description: Seconds per cell., type: float, default: 120}
  deadline: {description: Seconds from now after which no cell starts (0 - none)., type: float, default: 0}
  api_key: {description: The server's --api-key (sent as a Bearer token)., type: str}
  options:
    description: "Workload options: seeds_max_tokens, random {input_len, output_len, per_slot}, agent {turns,
      max_tokens}, seed."
    type: dict
    default: {}
author: dflash-deploy
"""

RETURN = r"""
cells: {description: "{cell id: {status (ok, partial, failed, skipped), summary, requests, server_before,
  server_after, seconds, errors}}", type: dict, returned: always}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.client import run_cell
from ansible.module_utils.dflash_common.hostlock import Heartbeat


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "cells": {"type": "list", "elements": "dict", "required": True},
            "timeout": {"type": "float", "default": 120.0},
            "deadline": {"type": "float", "default": 0.0},
            "options": {"type": "dict", "default": {}},
            "api_key": {"type": "str", "no_log": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    for i, cell in enumerate(p["cells"]):
        if not cell.get("id") or cell.get("workload") not in ("seeds", "random", "agent") \
                or not str(cell.get("concurrency", "")).isdigit():
            module.fail_json(msg=f"cells[{i}]: needs id, workload (seeds, random, agent) and concurrency: {cell!r}")
    out, t0 = {}, time.monotonic()
    with Heartbeat():  # a benchmark runs for minutes: the host lock stays fresh meanwhile
        measure(module, p, out, t0)
    module.exit_json(changed=False, cells=out)


def measure(module, p, out, t0):
    for cell in p["cells"]:
        left = p["deadline"] - (time.monotonic() - t0) if p["deadline"] > 0 else None
        if module.check_mode or (left is not None and left < 5):
            out[cell["id"]] = {"status": "skipped", "summary": {}, "requests": [],
                               "errors": ["check mode: nothing measured" if module.check_mode
                                          else "not measured: the run's deadline was reached"]}
            continue
        timeout = p["timeout"] if left is None else min(p["timeout"], left)
        out[cell["id"]] = run_cell(p["base_url"].rstrip("/"), cell["workload"], int(cell["concurrency"]), p["options"],
                                   timeout, api_key=p["api_key"])


if __name__ == "__main__":
    main()
