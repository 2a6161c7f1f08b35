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
  - Logic lives in C(module_utils/dflash_release/smoke.py).
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
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_common.secrets import redact
from ansible.module_utils.dflash_diagnose.engine import diagnose_text
from ansible.module_utils.dflash_release.gates import release_context
from ansible.module_utils.dflash_release.manifest import ReleaseError
from ansible.module_utils.dflash_release.ops import mark
from ansible.module_utils.dflash_release.smoke import (
    SHOW_PROPERTIES,
    SmokeError,
    check_named,
    describe_failure,
    endpoint,
    gate_argument_spec,
    gate_options,
    health_status,
    instance_secret_values,
    journal_argv,
    journal_tail,
    judged_records,
    merge_record,
    parse_show,
    smoke_all,
    smoke_argument_spec,
    smoke_options,
    target_argument_spec,
    target_constraints,
    target_instances,
    unit_name,
    wait_units,
)
from ansible.module_utils.dflash_release.startup import latest_stage, progress_line, says_ready
from ansible.module_utils.dflash_service.runner import RunnerUnits, log_since_last_start


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
            "service_manager": {"type": "str", "default": "systemd", "choices": ["systemd", "runner"]},
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
    if p["judged"] is not None:
        record_judged(module, p, where, secrets)
    insts = [{
        "name": item["name"],
        "unit": item.get("unit") or unit_name(item["name"]),
        "health_url": (item.get("base_url") or endpoint(item.get("args") or [], item.get("port"))) + "/health",
    } for item in insts_full]
    if not insts:
        module.exit_json(changed=False, verdict="healthy", seconds=0.0, failed_instances=[], instances={})
    if module.check_mode:
        module.exit_json(changed=p["restart"], verdict="skipped (check mode)", seconds=0.0, failed_instances=[],
                         instances={i["name"]: {"verdict": "not run"} for i in insts})

    if p["service_manager"] == "runner":
        systemctl = None
        runner = RunnerBackend(p["unit_dir"], p["log_dir"], p["run_dir"])
    else:
        systemctl = module.get_bin_path("systemctl", required=True)
        runner = None
    resume = p["resume"] or {}
    since = float(resume.get("since") or time.time())
    restart_out = resume.get("restart")
    restarted = bool(resume.get("restarted", p["restart"]))
    if resume:
        pass  # a later chunk of the same wait: the units were restarted (or not) by the first one
    elif p["restart"] and runner:
        restart_out = runner.restart([i["unit"] for i in insts])
    elif p["restart"]:
        # a unit that cannot even start (missing EnvironmentFile, bad ExecStart) makes this fail;
        # the poll below sees the unit state and the journal says why
        units = [i["unit"] for i in insts]
        # a new release deserves a fresh start: clear a failed state and the start-rate limit
        module.run_command([systemctl, "reset-failed", "--"] + units)
        rc, _out, err = module.run_command([systemctl, "restart", "--"] + units)
        restart_out = {"rc": rc, "stderr": err.strip()[-2000:]}

    def show(unit):
        if runner:
            return runner.show(unit)
        rc, out, _ = module.run_command([systemctl, "show", "-p", ",".join(SHOW_PROPERTIES), "--", unit])
        return parse_show(out) if rc == 0 else {"LoadState": "error"}

    # a manual restart resets NRestarts; without one, restarts from before this wait do not count
    if "baseline" in resume:
        baseline = resume["baseline"]
    else:
        baseline = 0 if restarted else {i["unit"]: show(i["unit"]).get("NRestarts") or 0 for i in insts}
    t_wait = time.time()
    offset = max(0.0, t_wait - since)  # seconds of earlier chunks (and the restart)
    left = max(0.05, p["timeout"] - offset)
    chunk = p["chunk_seconds"] if p["chunk_seconds"] and p["chunk_seconds"] > 0 else None
    journalctl = module.get_bin_path("journalctl")

    def logged_ready(inst):  # the log since the restart says "fired up" (read every few seconds at most)
        text = runner.log_text(inst["unit"]) if runner else journal_tail(module, journalctl, inst["unit"], since)
        return says_ready(text)

    res = wait_units(insts, show=show, health=health_status, timeout=min(left, chunk) if chunk else left,
                     interval=p["interval"], baseline_restarts=baseline, logged_ready=logged_ready,
                     ready_since=resume.get("ready_since"), ready_grace=p["ready_grace"])
    _shift(res, offset)
    if res["verdict"] == "timeout" and chunk and chunk < left:
        # not decided in this chunk: say where each pending instance is, the action plugin asks again
        progress = {}
        for inst in insts:
            if res["instances"][inst["name"]]["verdict"] in ("timeout", "starting"):
                text = runner.log_text(inst["unit"]) if runner else journal_tail(module, journalctl, inst["unit"], since)
                progress[inst["name"]] = progress_line(inst["name"], time.time() - since, p["timeout"],
                                                       latest_stage(text))
        module.exit_json(changed=restarted, verdict="starting", seconds=round(time.time() - since, 3),
                         failed_instances=[], instances={}, progress=progress,
                         resume={"since": since, "restart": restart_out, "restarted": restarted, "baseline": baseline,
                                 "ready_since": {n: s["ready_since"] for n, s in res["instances"].items()
                                                 if s.get("ready_since") is not None}})
    verdict_at = time.time()
    msgs = []
    for inst in insts:
        st = res["instances"][inst["name"]]
        st["unit"] = inst["unit"]
        if inst["name"] in res["failed"]:
            diag = None
            # a start-up past the timeout: how long its log has been silent tells a hang from a slow start
            hung = st.get("verdict") == "timeout"
            if p["diagnose"] and runner:
                diag = runner.diagnose(inst["unit"], p["fingerprint"], hung)
            elif p["diagnose"] and journalctl:
                diag = diagnose_unit(module, journalctl, inst["unit"], since, p["fingerprint"], hung)
            st["diagnosis"] = diag
            msgs.append(where + describe_failure(inst["name"], st, diag))
        if p["record_dir"]:
            merge_record(p["record_dir"], inst["name"], "wait",
                         redact(dict(st, since=since, restart=restart_out), secrets))
    result = {
        # epoch seconds on the host: restart issued, polling started, verdict reached, module done
        "timings": {"restart_at": since, "wait_from": t_wait, "verdict_at": verdict_at, "done_at": time.time()},
        "changed": restarted,
        "verdict": res["verdict"],
        "seconds": res["seconds"],
        "failed_instances": res["failed"],
        "instances": res["instances"],
        "restart": restart_out,
    }
    if res["verdict"] != "healthy":
        module.fail_json(msg="; ".join(msgs) or f"{where}wait: {res['verdict']}", **result)
    if p["smoke"]:
        # generation + speculative proof + gates in the same module call (one transport round trip less)
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


def _shift(res, offset):
    """Seconds of a later chunk counted from the restart."""
    if offset <= 0:
        return
    res["seconds"] = round(res["seconds"] + offset, 3)
    for st in res["instances"].values():
        if st.get("seconds") is not None:
            st["seconds"] = round(st["seconds"] + offset, 3)


class RunnerBackend(RunnerUnits):
    """Hosts without systemd (dflash_service_manager=runner): the rendered unit's command runs in its
    own session (module_utils/dflash_service/runner.py); the log file since the last start stands in for the
    journal. User=, sandboxing and Restart= are not applied there."""

    def diagnose(self, unit, fingerprint=None, hung=False):
        _path, log, _pid = self.paths(unit)
        silent = None
        try:
            with open(log, encoding="utf-8", errors="replace") as fh:
                text = log_since_last_start(fh.read())
            if hung:  # the log file's last write
                silent = max(0.0, time.time() - os.path.getmtime(log))
        except OSError as exc:
            text = str(exc)
        diag = dict(diagnose_text(text, source=log, fingerprint=fingerprint, silent_seconds=silent))
        diag["journal_tail"] = text.splitlines()[-30:]
        return diag


def journal_silence(module, unit, since, now=None):
    """Seconds since the unit's last journal entry after ``since`` (since ``since`` when it logged none)."""
    now = time.time() if now is None else now
    _rc, out, _err = module.run_command(["journalctl", "-u", unit, "--since", f"@{int(since)}", "--no-pager",
                                         "-o", "short-unix", "-n", "1"])
    return silence_from_short_unix(out, since, now)


def silence_from_short_unix(out, since, now):
    """``journalctl -o short-unix -n 1`` output -> seconds of silence (the entry's epoch, else ``since``)."""
    last = since
    for line in (out or "").splitlines():
        head = line.split(" ", 1)[0]
        try:
            last = max(last, float(head))
        except ValueError:
            continue
    return max(0.0, now - last)


def diagnose_unit(module, journalctl, unit, since, fingerprint=None, hung=False):
    """Diagnose the unit's journal since ``since``.  journald may lag the unit state by a few
    hundred ms: read again (up to ~2 s) while the log holds no decisive line. ``hung``: the instance
    timed out; the journal's silence goes into the diagnosis."""
    diag, text = None, ""
    silent = journal_silence(module, unit, since) if hung else None
    for attempt in range(5):
        _rc, text, _err = module.run_command(journal_argv(unit, since))
        diag = diagnose_text(text, source=f"journalctl -u {unit}", fingerprint=fingerprint, silent_seconds=silent)
        if diag.get("cause") != "unknown" or attempt == 4 or hung:
            break
        time.sleep(0.4)
    diag = dict(diag or {})
    diag["journal_tail"] = text.splitlines()[-30:]
    return diag


if __name__ == "__main__":
    main()
