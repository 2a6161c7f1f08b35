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
    kernel_abi, cuda_oom, port_in_use, model_missing, context_length, bad_server_args; unknown when no rule knows it.
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
  description: What the log says about the host (SM, GPU, torch/CUDA/driver versions, server args).
  type: dict
  returned: always
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
        },
        mutually_exclusive=[("unit", "log_file", "log_text")],
        required_one_of=[("unit", "log_file", "log_text")],
        supports_check_mode=True,
    )
    p = module.params
    if p["max_bytes"] < 1024:
        module.fail_json(msg=f"max_bytes must be at least 1024, got {p['max_bytes']}")
    if p["unit"] is not None:
        service = backend(p["service_manager"], run=module.run_command, log_dir=p["log_dir"],
                          journalctl=module.get_bin_path("journalctl", required=p["service_manager"] == "systemd"))
        result = diagnose_text(service.logs(p["unit"], lines=p["lines"]), source=service.log_source(p["unit"]))
    elif p["log_file"] is not None:
        path = p["log_file"]
        if not os.path.isfile(path):
            module.fail_json(msg=f"log_file {path} does not exist or is not a file")
        try:
            result = diagnose_file(path, max_bytes=p["max_bytes"])
        except OSError as exc:
            module.fail_json(msg=f"cannot read log_file {path}: {exc}")
    else:
        result = diagnose_text(p["log_text"], source="log_text")
    if p["fail_on_cause"] and result["cause"] != "unknown":
        module.fail_json(msg=f"{result['cause']}: {result['summary']}", changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
