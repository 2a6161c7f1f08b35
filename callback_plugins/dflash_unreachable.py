"""Callback plugin (always on): a host lost during a run is said in words.

Ansible reports a host that goes away in the middle of a task as "Module result deserialization
failed" or "Failed to create temporary directory" (podman, ssh), with the real reason in stderr. This
plugin adds one line naming the host, the task, what the connection said and what the next run does.
"""

from __future__ import annotations

DOCUMENTATION = """
name: dflash_unreachable
type: aggregate
short_description: Say in words that a host went away during the run
description:
  - On an unreachable host, or a task result that only says the module output could not be read or the
    temporary directory could not be made, prints which host, which task, the connection's own words and
    what to do.
"""

import re

from ansible.plugins.callback import CallbackBase

LOST_RE = re.compile(r"Module result deserialization failed|Failed to create temporary directory"
                     r"|Failed to connect to the host|Connection (?:timed out|refused|reset)|no container with name"
                     r"|can only create exec sessions on running containers|Shared connection to .* closed"
                     r"|MODULE FAILURE", re.IGNORECASE)
CONNECTION_RE = re.compile(r"no container with name[^\n]*|can only create exec sessions[^\n]*|container state improper"
                           r"[^\n]*|Connection (?:timed out|refused|reset)[^\n]*|No route to host[^\n]*"
                           r"|Could not resolve hostname[^\n]*|Shared connection to [^\n]* closed"
                           r"|exited with result \d+|Killed|Broken pipe", re.IGNORECASE)


# a play's own worded failure may quote what the connection said: it is never a host lost mid-task
FAIL_ACTIONS = frozenset({"fail", "ansible.builtin.fail", "ansible.legacy.fail", "assert", "ansible.builtin.assert",
                          "ansible.legacy.assert"})


def lost_reason(result: dict) -> str | None:
    """What the connection said when a host went away, or None when the result is an ordinary failure."""
    text = " ".join(str(result.get(k) or "") for k in ("msg", "module_stderr", "module_stdout", "stderr"))
    if not (result.get("unreachable") or LOST_RE.search(text)):
        return None
    if not result.get("unreachable") and "MODULE FAILURE" in text and not CONNECTION_RE.search(text):
        return None  # a module that crashed on a reachable host: its own message says why
    said = CONNECTION_RE.search(text)
    reason = said.group(0).strip() if said else (str(result.get("msg") or "").splitlines() or ["no answer"])[0][:200]
    rc = result.get("rc")
    if rc in (125, 137, 255) and not said:
        reason += f"; the connection ended with rc {rc}" + (" (killed)" if rc == 137 else "")
    return reason


def message(host: str, task: str, reason: str) -> str:
    return (f"{host}: lost the host during '{task}' ({reason}). Anything an activation had changed is in its "
            "journal on the host (<prefix>/activation.json): when the host is back, run deploy.yml (or "
            "rollback.yml) again; it finishes or reverts that activation first, and a reboot reverts it before "
            "the servers start")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dflash_unreachable"
    CALLBACK_NEEDS_ENABLED = False

    def _say(self, result):
        res = result._result if isinstance(result._result, dict) else {}
        if result._task.ignore_unreachable or res.get("_ansible_ignore_errors") or result._task.ignore_errors:
            return
        if result._task.action in FAIL_ACTIONS:
            return  # a failure the play words itself (deploy.yml: "the host does not answer"), quoting ssh
        reason = lost_reason(res)
        if reason:
            self._display.error(message(result._host.get_name(), result._task.get_name(), reason), wrap_text=False)

    def v2_runner_on_unreachable(self, result):
        self._say(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._say(result)
