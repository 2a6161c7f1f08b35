#!/usr/bin/python
"""Ansible module: measure one benchmark cell (a workload at a concurrency level) on the host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_cell
short_description: Measure one benchmark cell against a server on this host
description:
  - Sends the workload's requests (streamed SGLang C(/generate), greedy, ignore_eos) with O(concurrency)
    closed-loop workers to O(base_url) and returns the cell's figures (output tok/s, TTFT/ITL/latency
    percentiles, accept length and verify steps from the server's meta_info) with every request's
    record and the server's C(/metrics) and C(/get_server_info) before and after.
  - Bounded: nothing starts after O(timeout) seconds; requests in flight get the time left.
  - Runs on the host (loopback): the figures do not include the controller's network.
  - Logic in C(module_utils/dflash_bench_client.py); stdlib only.
options:
  base_url: {description: The server (e.g. http://127.0.0.1:30101)., type: str, required: true}
  workload: {description: seeds | random | agent., type: str, required: true, choices: [seeds, random, agent]}
  concurrency: {description: Closed-loop workers (agent - sessions)., type: int, required: true}
  timeout: {description: Seconds for the whole cell., type: float, default: 120}
  api_key: {description: The server's --api-key (sent as a Bearer token)., type: str}
  options:
    description: "Workload options: seeds_max_tokens, random {input_len, output_len, per_slot}, agent {turns,
      max_tokens}, seed."
    type: dict
    default: {}
author: dflash-deploy
"""

RETURN = r"""
cell: {description: "status (ok | partial | failed), summary, requests, server_before, server_after, seconds, errors",
       type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench_client import run_cell


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "workload": {"type": "str", "required": True, "choices": ["seeds", "random", "agent"]},
            "concurrency": {"type": "int", "required": True},
            "timeout": {"type": "float", "default": 120.0},
            "options": {"type": "dict", "default": {}},
            "api_key": {"type": "str", "no_log": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, cell={"status": "skipped", "summary": {}, "requests": [],
                                              "errors": ["check mode: nothing measured"]})
    cell = run_cell(p["base_url"].rstrip("/"), p["workload"], p["concurrency"], p["options"], p["timeout"],
                    api_key=p["api_key"])
    module.exit_json(changed=False, cell=cell)


if __name__ == "__main__":
    main()
