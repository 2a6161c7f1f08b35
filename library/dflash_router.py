#!/usr/bin/python
"""Ansible module dflash_router: the sglang-router's workers, readiness and a request through it."""

from __future__ import annotations

DOCUMENTATION = r"""
module: dflash_router
short_description: Drain / add back a worker of sglang-router, wait for the router, smoke-test through it
description:
  - Runs on the router host and talks to the router's HTTP API (sglang-router 0.3.2, C(/workers)).
  - C(action=worker state=absent) drains a worker before its restart: removes it from the router, waits
    until the router no longer lists it, then until the worker's own C(/metrics) shows no running or
    queued request (at most O(drain_timeout) seconds; past that the module warns and goes on).
  - C(action=worker state=present) adds it back and waits until the router lists it healthy.
  - C(action=wait) waits until the router answers and lists the O(expect)ed workers healthy.
  - C(action=smoke) sends one chat completion through the router (the seeds' prompt).
  - C(action=probe) imports the router's entry point with the interpreter of its venv layer (O(python)),
    before its unit points at that layer: a layer missing a dependency fails here, with the cause, and the
    running router is left as it was.
  - With O(missing_ok) and no router answering (a first deploy, before the router exists), C(worker) does nothing.
  - Logic lives in C(module_utils/dflash_router.py).
options:
  action: {description: What to do., type: str, required: true, choices: [worker, wait, smoke, probe]}
  router: {description: Base URL of the router on this host., type: str, default: "http://127.0.0.1:30000"}
  url: {description: The worker's URL (action=worker)., type: str}
  state: {description: absent (drain) or present (add back)., type: str, choices: [absent, present], default: present}
  timeout: {description: Seconds to wait for the router., type: float, default: 120}
  drain_timeout: {description: Seconds to wait for in-flight requests of a drained worker., type: float, default: 60}
  missing_ok: {description: No router answering is not an error for action=worker., type: bool, default: false}
  expect: {description: Worker URLs action=wait waits for., type: list, elements: str, default: []}
  min_healthy: {description: Fewest healthy workers action=wait accepts at the timeout., type: int, default: 1}
  prompt: {description: Chat prompt of action=smoke., type: str, default: "Write a Python function fibonacci(n) using iteration. Return only code."}
  max_tokens: {description: max_tokens of action=smoke., type: int, default: 64}
  host: {description: Host name used in messages., type: str, default: ''}
  python: {description: "The router layer's interpreter (action=probe).", type: str}
  unit: {description: "The router's unit (action=wait): a unit whose process is gone ends the wait at once, with its log's cause.", type: str}
  service_manager: {description: How the unit runs (action=wait)., type: str, choices: [systemd, runner], default: systemd}
  unit_dir: {description: Unit directory of runner-managed units., type: path, default: /etc/systemd/system}
  log_dir: {description: Logs of runner-managed units., type: path, default: /var/log/dflash}
  run_dir: {description: Pidfiles of runner-managed units., type: path, default: /run/dflash}
  api_key: {description: "The workers' API key (action=smoke), sent as Authorization Bearer.", type: str}
author: dflash-deploy
"""

EXAMPLES = r"""
- name: Drain an instance before its restart
  dflash_router:
    action: worker
    url: http://ct200:30001
    state: absent
"""

RETURN = r"""
seconds: {description: Seconds spent., type: float, returned: always}
warnings_list: {description: What the drain could not do (in-flight requests left, no /metrics)., type: list, returned: worker}
healthy: {description: Healthy workers (wait)., type: list, returned: wait}
record: {description: The chat completion record (smoke)., type: dict, returned: smoke}
version: {description: sglang-router's version in the layer (probe)., type: str, returned: probe}
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.dflash_router import (
    RouterError,
    http,
    probe_layer,
    set_worker,
    smoke_router,
    wait_router,
)
from ansible.module_utils.dflash_service.backend import NAMES, backend


def unit_watch(module, p):
    """(state(), log_tail()) of the router's unit through its service backend (systemd, or the runner on hosts
    without systemd), as dflash_wait reads an instance's."""
    unit = p["unit"]
    units = backend(p["service_manager"], run=module.run_command, unit_dir=p["unit_dir"], log_dir=p["log_dir"],
                    run_dir=p["run_dir"], systemctl=module.get_bin_path("systemctl"),
                    journalctl=module.get_bin_path("journalctl"))
    since = time.time() - 180  # the restart was the task before; its first lines may be older than this call

    def state():
        if p["service_manager"] == "systemd" and not units.systemctl:
            return {}
        st = units.state(unit)
        # systemctl itself failing says nothing about the router: no verdict from it (the /health poll decides)
        return {} if st.get("LoadState") == "error" else st

    return state, (lambda: units.logs(unit, since=since, lines=200))


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["worker", "wait", "smoke", "probe"]},
            "router": {"type": "str", "default": "http://127.0.0.1:30000"},
            "url": {"type": "str"},
            "state": {"type": "str", "choices": ["absent", "present"], "default": "present"},
            "timeout": {"type": "float", "default": 120.0},
            "drain_timeout": {"type": "float", "default": 60.0},
            "missing_ok": {"type": "bool", "default": False},
            "expect": {"type": "list", "elements": "str", "default": []},
            "min_healthy": {"type": "int", "default": 1},
            "prompt": {"type": "str", "default": "Write a Python function fibonacci(n) using iteration. Return only code."},
            "max_tokens": {"type": "int", "default": 64},
            "host": {"type": "str", "default": ""},
            "python": {"type": "str"},
            "unit": {"type": "str"},
            "service_manager": {"type": "str", "choices": list(NAMES), "default": "systemd"},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "log_dir": {"type": "path", "default": "/var/log/dflash"},
            "run_dir": {"type": "path", "default": "/run/dflash"},
            "api_key": {"type": "str", "no_log": True},
        },
        required_if=[("action", "worker", ["url"]), ("action", "probe", ["python"])],
        supports_check_mode=True,
    )
    p = module.params
    where = (p["host"] + ": ") if p["host"] else ""
    try:
        if p["action"] == "worker":
            if p["missing_ok"] and http("GET", p["router"].rstrip("/") + "/health", timeout=5.0)[0] != 200:
                module.exit_json(changed=False, seconds=0.0, warnings_list=[],
                                 msg=f"no router answers at {p['router']}: nothing to drain or add back")
            res = set_worker(p["router"], p["url"], p["state"], timeout=p["timeout"], drain_timeout=p["drain_timeout"],
                             check_mode=module.check_mode)
            for w in res["warnings"]:
                module.warn(where + w)
            module.exit_json(changed=res["changed"], seconds=res["seconds"], warnings_list=res["warnings"],
                             inflight=res.get("inflight"), url=res["url"], state=res["state"])
        if module.check_mode:
            module.exit_json(changed=False, msg="check mode: the router is not waited for nor tested")
        if p["action"] == "probe":
            res = probe_layer(p["python"])
            if not res["ok"]:
                module.fail_json(msg=f"{where}the router's layer ({p['python']}) cannot start sglang-router: "
                                     f"{res['error']}; the router's unit was not changed")
            module.exit_json(changed=False, version=res["version"])
        if p["action"] == "wait":
            state, tail = unit_watch(module, p) if p["unit"] else (None, None)
            res = wait_router(p["router"], p["expect"], timeout=p["timeout"], min_healthy=p["min_healthy"],
                              unit_state=state, log_tail=tail)
            for u in res["missing"]:
                module.warn(f"{where}the router does not list {u} as healthy (its instance is down or failing)")
            module.exit_json(changed=False, **res)
        rec = smoke_router(p["router"], p["prompt"], max_tokens=p["max_tokens"], timeout=p["timeout"],
                           api_key=p["api_key"])
        module.exit_json(changed=False, record=rec)
    except RouterError as exc:
        module.fail_json(msg=f"{where}router {p['router']}: {exc}")


if __name__ == "__main__":
    main()
