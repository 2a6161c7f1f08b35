"""Jinja filters of playbooks/status.yml and playbooks/guard.yml (roles/dflash_status): each host's report from
what library/dflash_status.py read there, the document, the table, the guard's decision. Thin wrappers over
module_utils/dflash_status/."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_status import guard as _guard
from ansible.module_utils.dflash_status import report as _report


def dflash_status_document(hostvars, hosts, settings=None):
    """The status document of ``hosts`` from their facts: ``__dflash_status`` (the module's result, or
    {unreachable: why}) and ``dflash_instances`` (the inventory's)."""
    out = {}
    for host in hosts or []:
        hv = _plain(hostvars[host]) if host in hostvars else {}
        res = hv.get("__dflash_status") or {}
        why = res.get("unreachable") if isinstance(res, dict) else None
        if not res:
            why = "no status was read (the host was not reached in this run)"
        out[host] = _report.host_report(host, None if why else res, hv.get("dflash_instances") or [],
                                        _plain(settings), unreachable=why)
    return _report.document(out)


def dflash_status_text(doc, guard_command="ansible-playbook playbooks/guard.yml"):
    return _report.text(_plain(doc), str(guard_command))


def dflash_status_guard(doc, host, instance, inventory_instances, alert=None, alert_value=None, force=False):
    """The guard's decision for ``instance`` of ``host`` (``doc``: dflash_status_document)."""
    inv = {i.get("name"): i for i in _plain(inventory_instances) or [] if isinstance(i, dict)}
    report = (_plain(doc).get("hosts") or {}).get(host) or {"verdict": "unreachable"}
    return _guard.decide(host, report, str(instance), inv.get(str(instance)), alert or None, alert_value,
                         bool(force))


def dflash_status_fallback_instances(instances, decision):
    """The host's dflash_instances with the guard's instance in its place, on its fallback (order kept)."""
    d = _plain(decision) or {}
    return [d["override"] if isinstance(i, dict) and i.get("name") == d.get("instance") and d.get("override") else i
            for i in _plain(instances) or []]


class FilterModule:
    def filters(self):
        return {
            "dflash_status_document": dflash_status_document,
            "dflash_status_text": dflash_status_text,
            "dflash_status_guard": dflash_status_guard,
            "dflash_status_fallback_instances": dflash_status_fallback_instances,
        }
