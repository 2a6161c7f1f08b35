"""Callback: the rollout summary at the end of deploy.yml, one row per host (release before, after, verdict).

A callback, because a rollout that stops (a failed canary, a batch past max_fail_percentage) ends
the playbook: no later play would run to print it. It listens for what deploy.yml records
(`dflash_rollout_plan`, `dflash_rollout_before`, `dflash_rollout_result` facts) and for failed tasks,
and prints the table of module_utils/dflash_rollout/batches.py once the run is over. With
DFLASH_ROLLOUT_SUMMARY=<file> it also writes the rows there as JSON. Runs that are not a rollout
(no plan recorded) print nothing.
"""

from __future__ import annotations

import json
import os

import ansible.module_utils
from ansible.plugins.callback import CallbackBase

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_rollout import batches as _rollout

DOCUMENTATION = r"""
name: dflash_rollout
type: aggregate
short_description: Rollout summary of deploy.yml (each host's release and verdict)
description:
  - Prints one row per host at the end of deploy.yml; with DFLASH_ROLLOUT_SUMMARY set, writes the rows as JSON there.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dflash_rollout"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self):
        super().__init__()
        self.plan = None
        self.before, self.after, self.failures, self.started = {}, {}, {}, set()

    def _facts(self, result):
        res = result._result or {}
        facts = res.get("ansible_facts") or {}
        host = result._host.get_name()
        if "dflash_rollout_plan" in facts and self.plan is None:
            self.plan = facts["dflash_rollout_plan"]
        if "dflash_rollout_before" in facts:
            self.before[host] = (facts["dflash_rollout_before"] or {}).get("release")
        if "dflash_rollout_result" in facts:
            self.after[host] = facts["dflash_rollout_result"]
            self.failures.pop(host, None)

    def v2_playbook_on_play_start(self, play):
        self.in_rollout = play.get_name().startswith("Roll out in batches")

    def _seen(self, result):
        if getattr(self, "in_rollout", False):
            self.started.add(result._host.get_name())

    def v2_runner_on_ok(self, result, **kwargs):
        self._seen(result)
        self._facts(result)

    def v2_runner_on_skipped(self, result, **kwargs):
        self._seen(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._seen(result)
        if ignore_errors:
            return
        msg = (result._result or {}).get("msg") or str(result._result)[:400]
        self.failures[result._host.get_name()] = f"{result._task.get_name()}: {msg}"

    def v2_runner_on_unreachable(self, result):
        self.failures[result._host.get_name()] = f"unreachable: {(result._result or {}).get('msg', '')}"

    def v2_playbook_on_stats(self, stats):
        if not self.plan:
            return
        hosts = list(self.plan.get("hosts") or [])
        rows = _rollout.summary(hosts, self.before, self.after, self.failures, self.plan.get("batches"),
                                self.started)
        self._display.banner("DFLASH ROLLOUT SUMMARY")
        self._display.display(f"serial {self.plan.get('serial')}, max_fail_percentage "
                              f"{self.plan.get('max_fail_percentage')}")
        for line in _rollout.summary_lines(rows):
            self._display.display(line)
        path = os.environ.get("DFLASH_ROLLOUT_SUMMARY")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"plan": self.plan, "rows": rows}, fh, indent=2, sort_keys=True, default=str)
                fh.write("\n")
