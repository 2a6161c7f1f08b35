#!/usr/bin/python
"""Ansible module: restart SGLang instance units and wait for them, failing fast."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_wait
short_description: Restart dflash instance units and wait until healthy, failing fast
description:
  - Optionally restarts the units (one C(systemctl restart) for all), then polls for every
    instance at once the unit's ActiveState/SubState/NRestarts (C(systemctl show)) and C(/health)
    every O(interval) seconds under one overall O(timeout).
  - The first unit that failed, exited or was restarted by systemd ends the wait at once; its
    journal since the restart is diagnosed (C(dflash_diagnose) logic) and the module fails with
    the cause and remedy. A hang past O(timeout) fails the same way.
  - Logic lives in C(module_utils/dflash_release/wait.py), the smoke test in C(smoke.py); the units are
    restarted and read through the service backend, C(module_utils/dflash_service/).
options:
  instances:
    description: Instances to wait for (or O(release_dir)).
    type: list
    elements: dict
    suboptions:
      name: {description: Instance name., type: str, required: true}
      unit: {description: Unit name (default C(dflash-<name>.service)), type: str}
      args: {description: The launch_server args (to find host and port)., type: list, elements: str}
      port: {description: Port (overrides args)., type: int}
      base_url: {description: Base URL (overrides args/port)., type: str}
  restart:
    description: Restart the units first (the restart count then starts from 0).
    type: bool
    default: true
  timeout:
    description: Overall seconds for all instances to become healthy.
    type: float
    default: 900
  interval:
    description: Poll interval in seconds (0.25 to 1 is sensible).
    type: float
    default: 0.25
  diagnose:
    description: Diagnose failed instances from their journal.
    type: bool
    default: true
  record_dir:
    description: Directory where C(<name>.json) records the wait of each instance.
    type: path
  host:
    description: Host name used in messages.
    type: str
    default: ''
  smoke:
    description: Once healthy, also run the generation smoke test and speculative proof (C(dflash_smoke)).
    type: bool
    default: false
  prompt: {description: Chat prompt of the smoke test., type: str, default: "Write a Python function fibonacci(n) using iteration. Return only code."}
  max_tokens: {description: max_tokens of the smoke chat completion., type: int, default: 128}
  temperature: {description: Temperature of the smoke test., type: float, default: 0}
  smoke_timeout: {description: Seconds per smoke HTTP request., type: float, default: 120}
  spec_max_new_tokens: {description: max_new_tokens of the /generate proof., type: int, default: 64}
  service_manager:
    description: systemd, or C(runner) for hosts without systemd (C(module_utils/dflash_service/runner.py)).
    type: str
    choices: [systemd, runner]
    default: systemd
  unit_dir: {description: Unit files (runner)., type: path, default: /etc/systemd/system}
  log_dir: {description: Logs of runner-managed units., type: path, default: /var/log/dflash}
  run_dir: {description: Pidfiles of runner-managed units., type: path, default: /run/dflash}
  mark:
    description: With O(release_dir) and everything passed, record the release healthy (C(status.json)).
    type: bool
    default: false
  gates:
    description: Per instance name, its C(smoke_gates) settings (see C(dflash_smoke)); with O(smoke).
    type: dict
    default: {}
  gate_defaults: {description: The host's C(dflash_smoke_gates) settings., type: dict, default: {}}
  use_gates: {description: Run the smoke gates (with O(smoke))., type: bool, default: true}
  baseline_release:
    description: The release the performance gates compare with (the one this release replaces).
    type: str
  progress_interval:
    description:
      - Seconds between start-up progress lines (elapsed time and the server's latest start-up stage,
        read from its log). The action plugin C(action_plugins/dflash_wait.py) waits in chunks of this
        length and prints the lines; 0 waits in one piece.
    type: float
    default: 20
  ready_grace:
    description:
      - Seconds an instance whose log says it finished its start-up ("fired up and ready to roll") may go
        without a 200 from /health before it fails as C(unanswered) (the health URL does not reach it, or
        it stopped answering), instead of waiting out O(timeout).
    type: float
    default: 60
  chunk_seconds:
    description:
      - Internal (the action plugin sets it). Return after this many seconds with C(verdict=starting),
        the progress and O(resume) when no instance decided yet; 0 waits until the verdict.
    type: float
    default: 0
  resume:
    description: Internal. The state a chunked wait returned (restart time, restart result); no restart then.
    type: dict
  fingerprint:
    description:
      - The host's C(dflash_fingerprint) fact, handed to the diagnosis of a failed instance (its GPU, SM, driver,
        CUDA and topology name the real GPU and options in the remedy; see C(dflash_diagnose)).
    type: dict
  judged:
    description:
      - Internal (the action plugin sets it). Per instance name, its smoke record with the gates judged on the
        controller (C(output.judge)) added. Nothing is restarted nor waited for; the records are written, the
        release is marked healthy (with O(mark)) when every gate passed, else the module fails naming the gates.
    type: dict
  sglang_facts:
    description:
      - "Per sglang version, its facts as host code needs them (the controller's C(dflash_sglang_host_facts) filter:
        version, pins, meta_info names, the attention backends DDTREE's verify takes). Each instance's version comes
        from the release manifest; its diagnosis remedies and its smoke record's accepted-draft count follow it."
    type: dict
    default: {}
extends_documentation_fragment: [dflash_release_target]
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Restart and wait
  dflash_wait:
    instances:
      - name: main
        args: [--port, "30001"]
    timeout: 600
"""

RETURN = r"""
verdict: {description: healthy, failed or timeout., type: str, returned: always}
seconds: {description: Seconds from the restart to the verdict., type: float, returned: always}
failed_instances: {description: Names that failed or timed out., type: list, returned: always}
instances: {description: Per instance verdict, seconds, unit state, /health and diagnosis., type: dict,
  returned: always}
smoke: {description: Per instance smoke record (with O(smoke))., type: dict, returned: with smoke}
timings: {description: Epoch seconds on the host of restart_at, wait_from, verdict_at and done_at., type: dict,
  returned: when the wait ran}
progress: {description: Per instance still starting, its latest start-up stage., type: dict,
  returned: with verdict starting (chunked wait)}
resume: {description: What the next chunk of the wait needs., type: dict, returned: with verdict starting}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.hostlock import Heartbeat, LockError, fence
from ansible.module_utils.dflash_common.secrets import redact
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from ansible.module_utils.dflash_release.gates import release_context
from ansible.module_utils.dflash_release.manifest import ReleaseError
from ansible.module_utils.dflash_release.ops import mark
from ansible.module_utils.dflash_release.smoke import (
    SmokeError,
    base_url,
    instance_secret_values,
    judged_records,
    merge_record,
    smoke_all,
)
from ansible.module_utils.dflash_release.target import (
    check_named,
    gate_argument_spec,
    gate_options,
    smoke_argument_spec,
    smoke_options,
    target_argument_spec,
    target_constraints,
    target_instances,
    unit_name,
)
from ansible.module_utils.dflash_release.wait import restart_and_wait
from ansible.module_utils.dflash_service.backend import NAMES, backend


def main():
    module = AnsibleModule(
        argument_spec={
            **target_argument_spec(),
            "restart": {"type": "bool", "default": True},
            "timeout": {"type": "float", "default": 900.0},
            "interval": {"type": "float", "default": 0.25},
            "diagnose": {"type": "bool", "default": True},
            "smoke": {"type": "bool", "default": False},
            **smoke_argument_spec("smoke_timeout"),
            "mark": {"type": "bool", "default": False},
            "service_manager": {"type": "str", "default": "systemd", "choices": list(NAMES)},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
            **gate_argument_spec(),
            "progress_interval": {"type": "float", "default": 20.0},
            "chunk_seconds": {"type": "float", "default": 0.0},
            "ready_grace": {"type": "float", "default": 60.0},
            "resume": {"type": "dict"},
            "fingerprint": {"type": "dict"},
            "judged": {"type": "dict"},
            "sglang_facts": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
        **target_constraints(),
    )
    p = module.params
    where = (p["host"] + ": ") if p["host"] else ""
    if p["release_dir"] and module.check_mode:
        module.exit_json(changed=p["restart"], msg="check mode: the instances are not restarted nor tested",
                         failed_instances=[], instances={})
    try:
        insts_full = target_instances(p)
        check_named(insts_full)
        gates, gate_context = gate_options(p, insts_full) if p["smoke"] else (None, {})
    except SmokeError as exc:
        module.fail_json(msg=f"{where}{exc}")
    # API keys and env-file secrets: masked in everything this module returns (Ansible's no_log values)
    # and in the records it writes (redact); a crashing sglang logs its ServerArgs, keys included
    secrets = instance_secret_values(insts_full)
    module.no_log_values.update(secrets)
    try:
        fence()  # this run's host lock: refreshed, or the wait refused when another run holds the host
    except LockError as exc:
        module.fail_json(msg=f"{where}{exc}")
    if p["judged"] is not None:
        record_judged(module, p, where, secrets)
    # each instance's sglang version (the manifest's entry): its diagnosis' remedies and its smoke test's meta_info
    # names speak to that version
    for item in insts_full:
        item["sglang"] = (p["sglang_facts"] or {}).get(item.get("sglang_version") or "")
    insts = [{
        "name": item["name"],
        "unit": item.get("unit") or unit_name(item["name"]),
        "health_url": base_url(item) + "/health",
        "sglang": item["sglang"],
    } for item in insts_full]
    if not insts:
        module.exit_json(changed=False, verdict="healthy", seconds=0.0, failed_instances=[], instances={})
    if module.check_mode:
        module.exit_json(changed=p["restart"], verdict="skipped (check mode)", seconds=0.0, failed_instances=[],
                         instances={i["name"]: {"verdict": "not run"} for i in insts})

    systemctl = module.get_bin_path("systemctl", required=p["service_manager"] == "systemd")
    units = backend(p["service_manager"], run=module.run_command, unit_dir=p["unit_dir"], log_dir=p["log_dir"],
                    run_dir=p["run_dir"], systemctl=systemctl, journalctl=module.get_bin_path("journalctl"))

    def record(name, st):
        if p["record_dir"]:
            merge_record(p["record_dir"], name, "wait", redact(st, secrets))

    with Heartbeat():  # a wait of minutes in one call (progress_interval 0) keeps the lock fresh
        outcome = restart_and_wait(insts, units, p, diagnose_text, where, record)
    if outcome[0] == "starting":
        module.exit_json(verdict="starting", failed_instances=[], instances={}, **outcome[1])
    _done, result, msgs = outcome
    if result["verdict"] != "healthy":
        module.fail_json(msg="; ".join(msgs) or f"{where}wait: {result['verdict']}", **result)
    if p["smoke"]:
        # generation + speculative proof + gates in the same module call (one transport round trip less)
        with Heartbeat():
            smoke, failed, smsgs = smoke_all(insts_full, smoke_options(p, "smoke_timeout"), p["record_dir"], where,
                                             gates, gate_context)
        result["smoke"] = smoke
        result["failed_instances"] = failed
        if failed:
            module.fail_json(msg="; ".join(smsgs), **result)
    if p["mark"] and p["release_dir"]:
        # the release proved healthy: status.json (what dflash_release action=mark writes)
        rdir = os.path.realpath(p["release_dir"])
        detail = redact({"instances": [i["name"] for i in insts], "smoke": result.get("smoke", {})}, secrets)
        try:
            result["status"] = mark(os.path.dirname(os.path.dirname(rdir)), os.path.basename(rdir), "healthy",
                                    detail)["status"]
        except ReleaseError as exc:
            module.fail_json(msg=f"{where}{exc}", **result)
    module.exit_json(**result)


def record_judged(module, p, where, secrets):
    """The second call of a smoke test whose reply the controller judged (``judged``: {name: smoke record with
    the controller's gates added}): write the records, mark the release healthy when everything passed (with
    ``mark``), else fail naming the gates, as the first call would have."""
    ctx = release_context(p["release_dir"], p["baseline_release"])
    smoke, failed, msgs = judged_records(p["judged"], ctx, where)
    smoke = {n: redact(r, secrets) for n, r in smoke.items()}
    if p["record_dir"]:
        for name, rec in smoke.items():
            merge_record(p["record_dir"], name, "smoke", rec)
    result = {"changed": False, "smoke": smoke, "failed_instances": failed, "verdict": "healthy"}
    if failed:
        module.fail_json(msg=redact("; ".join(msgs), secrets), **result)
    if p["mark"] and p["release_dir"]:
        rdir = os.path.realpath(p["release_dir"])
        detail = redact({"instances": sorted(smoke), "smoke": smoke}, secrets)
        try:
            result["status"] = mark(os.path.dirname(os.path.dirname(rdir)), os.path.basename(rdir), "healthy",
                                    detail)["status"]
        except ReleaseError as exc:
            module.fail_json(msg=f"{where}{exc}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
