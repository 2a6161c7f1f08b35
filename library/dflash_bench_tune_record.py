#!/usr/bin/python
"""Ansible module (controller): write one tune round's cells and decide whether to measure another."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_bench_tune_record
short_description: Write a tune round's cell records, evaluate the wave, apply the stopping rule
description:
  - One C(cells/<configuration>__<load>__r<round>.json) per cell of the round (the configuration with its
    flags redacted, the load point, every request); a configuration whose server did not come up gets one
    record with its cause (first round only).
  - Then, from every record of the wave so far, each configuration's deciding figure (its best goodput under
    the objective, with the t interval over rounds) and the stopping rule - stop when every interval is
    narrower than O(rule.ci_target) of its mean (after O(rule.min_rounds) rounds), at O(rule.max_rounds), or when
    the time left is shorter than the last round took.
  - With O(auto_rates), the first round's closed-loop cells set the open-loop rates of the next rounds.
  - Run it delegated to localhost. Logic in C(module_utils/dflash_bench/tune.py), C(goodput.py), C(ci.py).
options:
  run_dir: {description: The run folder., type: path, required: true}
  meta: {description: "The run's {run, host, release_id, fingerprint_digest}.", type: dict, required: true}
  configs: {description: Planned configurations by name., type: dict, required: true}
  names: {description: The wave's configurations that are measured., type: list, elements: str, required: true}
  cells: {description: The round's cells (dflash_bench_tune_round)., type: list, elements: dict, default: []}
  failures: {description: "{configuration: {stage, status, msg, diagnosis}} of servers that did not come up.",
             type: dict, default: {}}
  round: {description: The round's number., type: int, required: true}
  wave: {description: The wave's number (from 1)., type: int, default: 1}
  objective: {description: "The objective {ttft_ms, itl_ms, itl_quantile, e2e_ms}.", type: dict, required: true}
  rule: {description: "{min_rounds, max_rounds, ci_target, time_left_s, last_round_s}.", type: dict, required: true}
  auto_rates: {description: Derive the open-loop rates from this round's closed-loop cells., type: bool,
               default: false}
  rate_fractions: {description: "With auto_rates - the rates as these fractions of the best closed-loop request rate.",
                   type: list, elements: float, default: [0.25, 0.5, 0.75, 1.0, 1.25]}
author: dflash-deploy
"""

RETURN = r"""
stop: {description: Whether the wave's rounds are over., type: bool, returned: always}
reason: {description: "ci, max_rounds, budget or empty.", type: str, returned: always}
lines: {description: One line per configuration (deciding figure and interval) and the verdict., type: list,
        returned: always}
rates: {description: The open-loop rates derived (auto_rates only)., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_bench import tune


def main():
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "required": True},
            "meta": {"type": "dict", "required": True},
            "configs": {"type": "dict", "required": True},
            "names": {"type": "list", "elements": "str", "required": True},
            "cells": {"type": "list", "elements": "dict", "default": []},
            "failures": {"type": "dict", "default": {}},
            "round": {"type": "int", "required": True},
            "wave": {"type": "int", "default": 1},
            "objective": {"type": "dict", "required": True},
            "rule": {"type": "dict", "required": True},
            "auto_rates": {"type": "bool", "default": False},
            "rate_fractions": {"type": "list", "elements": "float", "default": [0.25, 0.5, 0.75, 1.0, 1.25]},
        },
        supports_check_mode=False,
    )
    p = module.params
    records = [tune.failure_record(p["meta"], p["configs"].get(name) or {"name": name}, f)
               for name, f in sorted(p["failures"].items())] if p["round"] == 1 else []
    records += [tune.record(p["meta"], p["configs"].get(c["config"]) or {"name": c["config"]}, c, p["round"])
                for c in p["cells"]]
    tune.write_records(p["run_dir"], records)
    rates = []
    if p["auto_rates"]:
        rates = tune.auto_rates([c for c in p["cells"] if c["load"]["kind"] == "concurrency"], p["rate_fractions"])
    names = [n for n in p["names"] if n not in p["failures"]]
    res = tune.evaluate(p["run_dir"], names, p["objective"], p["round"], p["rule"])
    lines = res["lines"]
    if p["auto_rates"]:
        lines.append("open-loop rates from this round's closed-loop capacity: "
                     + (", ".join(f"{r:g}" for r in rates) + " req/s" if rates else "none (nothing completed)"))
    stop, reason = res["stop"] or not names, res["reason"] or ("" if names else "no_server")
    tune.append_round(p["run_dir"], {"wave": p["wave"], "names": names, "round": p["round"], "stop": stop,
                                     "reason": reason, "lines": lines, "deciding": res["deciding"], "rates": rates})
    module.exit_json(changed=bool(records), stop=stop, reason=reason, lines=lines, rates=rates,
                     deciding=res["deciding"])


if __name__ == "__main__":
    main()
