"""Callback for benchmarks/fingerprint_bench.py: counts task results per host and module.

Writes {host: {action: count}} as JSON to $FINGERPRINT_COUNT_FILE at the end of the run."""

from __future__ import annotations

import json
import os
from collections import defaultdict

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: fingerprint_count_calls
type: aggregate
short_description: count module results per host (dflash-deploy bench)
description: Counts every task result per host and action; writes JSON to $FINGERPRINT_COUNT_FILE.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fingerprint_count_calls"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.counts = defaultdict(lambda: defaultdict(int))

    def _count(self, result):
        host = result._host.get_name()
        delegated = result._result.get("_ansible_delegated_vars", {}).get("ansible_host")
        action = result._task.action
        key = f"{action} (delegated to {delegated})" if delegated else action
        self.counts[host][key] += 1

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_runner_on_unreachable(self, result):
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        path = os.environ.get("FINGERPRINT_COUNT_FILE")
        if path:
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({h: dict(c) for h, c in self.counts.items()}, fh, indent=2, sort_keys=True)
