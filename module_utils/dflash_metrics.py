"""Prometheus scrape targets (file_sd) for every instance and the router.

Pure functions, no Ansible import. `file_sd` renders the JSON a Prometheus `file_sd_configs` entry
reads: one target group per scraped endpoint, labelled with the host, the instance and its role, so
a dashboard can tell ranks and routers apart. Instances with `metrics: false` are left out (they
serve no /metrics); a node rank > 0 of a multi-node instance is kept (sglang 0.5.11's health server
on those ranks serves /metrics too).
"""

from __future__ import annotations

import json

from ansible.module_utils.dflash_common.net import url_host
from ansible.module_utils.dflash_instances.tp import nnodes_of
from ansible.module_utils.dflash_router import listen_address


def targets(fleet, routers=None) -> list:
    """fleet: {host: {address, bind, instances}} (instances reached as the router reaches them); routers: {host: {address, prometheus_port}}.
    -> [{"targets": ["addr:port"], "labels": {...}}], sorted, one group per endpoint."""
    out = []
    for host in sorted(fleet or {}):
        entry = fleet[host] or {}
        for inst in entry.get("instances") or []:
            if not isinstance(inst, dict) or inst.get("metrics", True) is False or not inst.get("port"):
                continue
            addr = url_host(listen_address(inst, entry, host)[1])
            labels = {"dflash_host": host, "dflash_instance": str(inst.get("name")), "dflash_role": "instance",
                      "dflash_algorithm": str(inst.get("algorithm") or "DFLASH").upper()}
            if nnodes_of(inst) > 1:
                labels["dflash_node_rank"] = str(inst.get("node_rank", 0))
            out.append({"targets": [f"{addr}:{inst['port']}"], "labels": labels})
    for host in sorted(routers or {}):
        r = routers[host] or {}
        out.append({"targets": [f"{url_host(r.get('address') or host)}:{r['prometheus_port']}"],
                    "labels": {"dflash_host": host, "dflash_instance": "router", "dflash_role": "router"}})
    return sorted(out, key=lambda g: (g["labels"]["dflash_role"], g["targets"][0]))


def file_sd(fleet, routers=None) -> str:
    """The file_sd JSON text (stable: sorted keys, newline at the end)."""
    return json.dumps(targets(fleet, routers), indent=2, sort_keys=True) + "\n"
