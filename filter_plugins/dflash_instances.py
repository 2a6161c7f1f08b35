"""Jinja filters of the instances stage: thin wrappers over module_utils/dflash_instances.py."""

from __future__ import annotations

import os
import sys

# module_utils/ on sys.path (this file is loaded by path: nothing of the repo is importable before)
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in sys.path:
    sys.path.insert(0, _MU)

import dflash_instances as _di
from dflash_jinja import plain as _plain
from dflash_runner import default_service_manager


def dflash_instances_errors(instances, host, fingerprint, host_facts, rules, host_disabled_rules=(),
                            protect_home=True, service_user="sglang"):
    """All placement errors of one host (list of strings; empty = valid)."""
    rules = _plain(rules) or []
    errors = _di.check_rules_table(rules)
    errors += _di.validate_instances(
        str(host), _plain(instances), _plain(fingerprint), _plain(host_facts),
        [r["name"] for r in rules], _plain(host_disabled_rules) or [], bool(protect_home),
        gpu_checker=_di.default_gpu_checker(), service_user=str(service_user))
    return errors


def dflash_instances_flags(instances, rules, fingerprint, probe, host_facts, tree, host_disabled_rules=(),
                           lab_standin=False, bind_host="0.0.0.0"):
    """The dflash_flags fact: {instance: {args, env, applied, skipped, removed_cause, ...}}."""
    return _di.plan_flags(_plain(instances), _plain(rules), _plain(fingerprint), _plain(probe),
                          _plain(host_facts), _plain(tree), _plain(host_disabled_rules) or [],
                          bool(lab_standin), str(bind_host))


def dflash_instances_report(flags):
    return _di.flags_report(_plain(flags))


def dflash_instances_stale(unit_files, instances):
    """Installed dflash-*.service files the inventory no longer wants."""
    return _di.stale_units(_plain(unit_files), _plain(instances))


class FilterModule:
    def filters(self):
        return {
            "dflash_instances_errors": dflash_instances_errors,
            "dflash_instances_flags": dflash_instances_flags,
            "dflash_instances_report": dflash_instances_report,
            "dflash_instances_stale": dflash_instances_stale,
            # ansible_facts -> systemd | runner: dflash_service_manager's default (instances and release roles)
            "dflash_service_manager_default": default_service_manager,
        }
