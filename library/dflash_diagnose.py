#!/usr/bin/python
"""Ansible module: diagnose a failed SGLang / vLLM / PyTorch server from its log."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dflash_diagnose
short_description: Tell why an SGLang server failed, from its log
description:
  - Reads a server log (a unit's, through the host's service backend; a file on the managed host; or text passed
    in) and returns the root
    cause of the failure as one of a fixed set of causes, with a summary, a concrete remedy
    (the flag or the pin) and the few log lines that decided it.
  - The first fatal error wins over later noise (rank shutdown, sigquit, NCCL aborts of the
    other ranks). Journal prefixes, rank prefixes, ANSI colours and CRLF line ends are handled.
    Logs larger than I(max_bytes) are read as head and tail.
  - Never changes anything; check mode is supported.
options:
  unit:
    description: A unit whose log to read, through O(service_manager) (its journal under systemd, the runner's log
      file otherwise; the newest O(lines) lines). Exactly one of I(unit), I(log_file), I(log_text).
    type: str
  service_manager:
    description: The host's service backend (C(dflash_service_manager)), for O(unit).
    type: str
    choices: [systemd, runner]
    default: systemd
  log_dir: {description: Where the runner writes each unit's log (O(unit) with the runner)., type: path,
    default: /var/log/dflash}
  lines:
    description: How many of the newest lines of the unit's log to read (O(unit)).
    type: int
    default: 20000
  log_file:
    description: Path of the log on the managed host.
    type: path
  log_text:
    description: The log itself (e.g. a registered C(journalctl -u ...) output).
    type: str
  max_bytes:
    description: Read at most this many bytes of I(log_file) (head and tail beyond it).
    type: int
    default: 16777216
  fail_on_cause:
    description: Fail the task when a cause other than C(unknown) is found.
    type: bool
    default: false
  fingerprint:
    description:
      - The host's C(dflash_fingerprint) fact (stage 1). Its GPU, SM, driver, CUDA and toolkits are used instead
        of what the log seems to say (a log names the GPU only by accident, and sometimes wrongly), so the remedy
        names the real GPU and the options it runs; its topology (P2P, NICs) fills the NCCL hints of a hang.
    type: dict
  silent_seconds:
    description:
      - How long the log has been silent while the server was still starting (C(dflash_wait) measures it). A log
        with no error line is then a start-up hang (cause C(startup_hang)) in the last stage it reached, whatever
        that stage; without it only a log that stops inside a stage is read as one.
    type: float
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Diagnose an instance from its log (journal or runner log)
  dflash_diagnose:
    unit: dflash-main.service
    service_manager: "{{ dflash_service_manager }}"
  register: __diagnosis

- name: Diagnose a saved log (from the repository root)
  # ansible localhost -m dflash_diagnose -a log_file=/tmp/sglang.log
  dflash_diagnose:
    log_file: /tmp/sglang.log
"""

RETURN = r"""
cause:
  description: One of the causes of module_utils/dflash_diagnose/rules.py (CAUSES), e.g. missing_module,
    kernel_abi, cuda_oom, port_in_use, model_missing, context_length, bad_server_args, gpu_arch_refused,
    startup_hang; unknown when no rule knows it.
  type: str
  returned: always
summary:
  description: One sentence naming what failed, with the names from the log.
  type: str
  returned: always
remedy:
  description: The concrete fix (flag, pin, package, port, path).
  type: str
  returned: always
evidence:
  description: The log lines that decided the cause, verbatim (ANSI colours removed).
  type: list
  elements: str
  returned: always
facts:
  description: What the log says about the host (SM, GPU, torch/CUDA/driver versions, server args), the
    fingerprint's values over it (then C(log_sm) / C(log_gpu_name) keep what the log said when it differs).
  type: dict
  returned: always
host:
  description: The fingerprint's GPU (C(gpu), C(sm) when all GPUs are one model; C(gpus) always), driver, CUDA,
    toolkits and torch.
  type: dict
  returned: with I(fingerprint)
stage:
  description: For C(startup_hang) (and a kill that ended a start-up stuck in a stage) the stage the start-up
    stopped in, one of distributed_init, nccl, weights, kv_pool, graph_capture, warmup, other.
  type: str
  returned: when a start-up stage is the point
notes:
  description: Where the log disagreed with the fingerprint (e.g. the SM it seems to name).
  type: list
  elements: str
  returned: when there is such a disagreement
also_seen:
  description: Other causes matched later in the same run (consequences or noise).
  type: list
  elements: str
  returned: when a cause was found
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_diagnose.engine import diagnose_file, diagnose_text
from ansible.module_utils.dflash_service.backend import NAMES, backend


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str"},
            "service_manager": {"type": "str", "choices": list(NAMES), "default": "systemd"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "lines": {"type": "int", "default": 20000},
            "log_file": {"type": "path"},
            "log_text": {"type": "str"},
            "max_bytes": {"type": "int", "default": 16 * 1024 * 1024},
            "fail_on_cause": {"type": "bool", "default": False},
            "fingerprint": {"type": "dict"},
            "silent_seconds": {"type": "float"},
        },
        mutually_exclusive=[("unit", "log_file", "log_text")],
        required_one_of=[("unit", "log_file", "log_text")],
        supports_check_mode=True,
    )
    p = module.params
    if p["max_bytes"] < 1024:
        module.fail_json(msg=f"max_bytes must be at least 1024, got {p['max_bytes']}")
    if p["silent_seconds"] is not None and p["silent_seconds"] < 0:
        module.fail_json(msg=f"silent_seconds must be 0 or more, got {p['silent_seconds']}")
    extra = {"fingerprint": p["fingerprint"], "silent_seconds": p["silent_seconds"]}
    if p["unit"] is not None:
        service = backend(p["service_manager"], run=module.run_command, log_dir=p["log_dir"],
                          journalctl=module.get_bin_path("journalctl", required=p["service_manager"] == "systemd"))
        result = diagnose_text(service.logs(p["unit"], lines=p["lines"]), source=service.log_source(p["unit"]),
                               **extra)
    elif p["log_file"] is not None:
        path = p["log_file"]
        if not os.path.isfile(path):
            module.fail_json(msg=f"log_file {path} does not exist or is not a file")
        try:
            result = diagnose_file(path, max_bytes=p["max_bytes"], **extra)
        except OSError as exc:
            module.fail_json(msg=f"cannot read log_file {path}: {exc}")
    else:
        result = diagnose_text(p["log_text"], source="log_text", **extra)
    if p["fail_on_cause"] and result["cause"] != "unknown":
        module.fail_json(msg=f"{result['cause']}: {result['summary']}", changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
