"""Jinja filters over module_utils/dflash_fingerprint/ (fleet report of the fingerprint stage)."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_fingerprint import report


def dflash_fleet_rows(fleet, refusals=None):
    return report.fleet_rows(_plain(fleet), _plain(refusals))


def dflash_fleet_text(fleet, refusals=None):
    return report.fleet_text(_plain(fleet), _plain(refusals))


def dflash_fleet_markdown(fleet, refusals=None):
    return report.fleet_markdown(_plain(fleet), _plain(refusals))


def dflash_fleet_collect(hostvars, hosts):
    """-> {fleet: {host: dflash_fingerprint or None}, refusals: {host: [..]}} for the given hosts."""
    fleet, refusals = {}, {}
    for host in hosts or []:
        hv = hostvars.get(host, {})
        fleet[host] = _plain(hv.get("dflash_fingerprint"))
        result = hv.get("__dflash_fingerprint_result") or {}
        refusals[host] = _plain(result.get("refusals") or [])
    return {"fleet": fleet, "refusals": refusals}


class FilterModule:
    def filters(self):
        return {
            "dflash_fleet_collect": dflash_fleet_collect,
            "dflash_fleet_rows": dflash_fleet_rows,
            "dflash_fleet_text": dflash_fleet_text,
            "dflash_fleet_markdown": dflash_fleet_markdown,
        }
