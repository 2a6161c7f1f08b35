"""Jinja filters over module_utils/dflash_fingerprint/ (fleet report of the fingerprint stage)."""

from __future__ import annotations

import os
import sys

# module_utils/ on sys.path (this file is loaded by path: nothing of the repo is importable before)
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in sys.path:
    sys.path.insert(0, _MU)

import dflash_fingerprint.report
from dflash_jinja import plain as _plain


def dflash_fleet_rows(fleet, refusals=None):
    return dflash_fingerprint.report.fleet_rows(_plain(fleet), _plain(refusals))


def dflash_fleet_text(fleet, refusals=None):
    return dflash_fingerprint.report.fleet_text(_plain(fleet), _plain(refusals))


def dflash_fleet_markdown(fleet, refusals=None):
    return dflash_fingerprint.report.fleet_markdown(_plain(fleet), _plain(refusals))


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
