#!/usr/bin/python
"""Ansible module: measure one round of tune.yml's cells against a wave's servers on the host."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_tune_round
short_description: Measure one round of tune cells (open and closed loop) against a wave's servers
description:
  - One round - for each load point (closed-loop concurrency levels, then open-loop request rates), each
    server of the wave in turn (their order rotated by the round number), sends the prompts as streamed
    SGLang C(/generate) requests (greedy, ignore_eos) and returns every request's record (TTFT,
    inter-token latencies, verify steps and accept length from the server's meta_info) with the server's
    C(/metrics) and C(/get_server_info) before and after.
  - Open loop - Poisson arrivals at the rate, seeded by the round, so every server of a round gets the same
    arrivals; closed loop - that many clients, each sending its next request when its last one finished.
  - Bounded - O(timeout) seconds per cell; no cell starts once O(deadline) seconds have passed (it comes back
    as skipped).
  - Runs on the host against loopback. Logic in C(module_utils/dflash_bench/openloop.py), stdlib only.
options:
  servers:
    description: "The wave's servers that came up - {name, base_url}."
    type: list
    elements: dict
    required: true
  loads:
    description: "The load points - {kind (rate or concurrency), value, requests}."
    type: list
    elements: dict
    required: true
  api_keys: {description: "{server name: its --api-key} (sent as a Bearer token).", type: dict, default: {}}
  prompts: {description: "The prompts - {label, payload (a /generate body)}.", type: list, elements: dict, required: true}
  round: {description: The round's number (from 1)., type: int, required: true}
  seed: {description: Seed of the open-loop arrivals (with the round and the rate)., type: int, default: 0}
  timeout: {description: Seconds per cell., type: float, default: 120}
  deadline: {description: Seconds from now after which no cell starts (0 - none)., type: float, default: 0}
author: dflash-deploy
"""

RETURN = r"""
cells: {description: "[{config, load, status, requests, wall_s, offered_s, server_before, server_after, seconds,
  errors}] in measuring order", type: list, returned: always}
seconds: {description: The round's duration., type: float, returned: always}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench.openloop import run_load, warm_up
from ansible.module_utils.dflash_bench.tune import round_order
from ansible.module_utils.dflash_common.hostlock import Heartbeat


def main():
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "required": True},
            "loads": {"type": "list", "elements": "dict", "required": True},
            "prompts": {"type": "list", "elements": "dict", "required": True},
            "api_keys": {"type": "dict", "default": {}, "no_log": True},
            "round": {"type": "int", "required": True},
            "seed": {"type": "int", "default": 0},
            "timeout": {"type": "float", "default": 120.0},
            "deadline": {"type": "float", "default": 0.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    for i, load in enumerate(p["loads"]):
        if load.get("kind") not in ("rate", "concurrency") or not float(load.get("value") or 0) > 0 \
                or not int(load.get("requests") or 0) > 0:
            module.fail_json(msg=f"loads[{i}]: needs kind (rate or concurrency), value > 0 and requests > 0: {load!r}")
    if not p["prompts"] or any(not isinstance(x.get("payload"), dict) for x in p["prompts"]):
        module.fail_json(msg="prompts: a non-empty list of {label, payload}")
    with Heartbeat():  # a round runs for minutes: the host lock stays fresh meanwhile
        out, seconds = measure(module, p)
    module.exit_json(changed=False, cells=out, seconds=seconds)


def measure(module, p):
    servers = {s["name"]: s for s in p["servers"]}
    t0 = time.monotonic()
    out = []
    if not module.check_mode:
        for s in servers.values():
            warm_up(s["base_url"].rstrip("/"), p["api_keys"].get(s["name"]))
    for name, load in round_order(list(servers), p["loads"], p["round"]):
        left = p["deadline"] - (time.monotonic() - t0) if p["deadline"] > 0 else None
        if module.check_mode or (left is not None and left < 5):
            out.append({"config": name, "load": load, "status": "skipped", "requests": [],
                        "errors": ["check mode: nothing measured" if module.check_mode
                                   else "not measured: the time budget ended"]})
            continue
        timeout = p["timeout"] if left is None else min(p["timeout"], left)
        srv = servers[name]
        cell = run_load(srv["base_url"].rstrip("/"), p["prompts"], load, seed=p["seed"] * 1000 + p["round"],
                        timeout=timeout, api_key=p["api_keys"].get(name))
        out.append(dict(cell, config=name, load=load))
    return out, round(time.monotonic() - t0, 3)


if __name__ == "__main__":
    main()
