"""Jinja filters of the fleet plays (deploy.yml): rollout batches, checks across hosts, the router's
workers and arguments. Thin wrappers over module_utils/dflash_rollout/ and dflash_router.py
(the metrics stage's filters: filter_plugins/dflash_metrics.py)."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils import dflash_router as _router
from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_rollout import batches as _rollout
from ansible.module_utils.dflash_rollout import multinode as _mn


def dflash_rollout_fleet(hostvars, hosts):
    """{host: {address, bind, instances}} for the given hosts, from the inventory (no facts needed).
    address: dflash_fleet_address, else ansible_host, else the inventory name; bind: the instances'
    default listen address (dflash_instances_bind_host, 127.0.0.1 as that role's default)."""
    out = {}
    for host in hosts or []:
        hv = hostvars.get(host, {})
        out[str(host)] = {
            "address": str(hv.get("dflash_fleet_address") or hv.get("ansible_host") or host),
            "bind": str(hv.get("dflash_instances_bind_host") or "127.0.0.1"),
            "instances": _plain(hv.get("dflash_instances") or []),
        }
    return out


def dflash_rollout_routers(hostvars, hosts):
    """{host: {address, port, prometheus_port}} of the router hosts (role defaults when unset)."""
    out = {}
    for host in hosts or []:
        hv = hostvars.get(host, {})
        out[str(host)] = {
            "address": str(hv.get("dflash_fleet_address") or hv.get("ansible_host") or host),
            "port": int(hv.get("dflash_router_port") or 30000),
            "prometheus_port": int(hv.get("dflash_router_prometheus_port") or 29000),
        }
    return out


def dflash_rollout_router_endpoints(hostvars, hosts):
    """[[router host, its port], ...]: where the drain tasks talk to each router (on that host)."""
    return [[h, r["port"]] for h, r in dflash_rollout_routers(hostvars, hosts).items()]


def dflash_rollout_addresses(hostvars, hosts):
    """{host: [names and addresses it answers to]} from the inventory and the gathered facts."""
    out = {}
    for host in hosts or []:
        hv = hostvars.get(host, {})
        facts = _plain(hv.get("ansible_facts") or {})
        names = {str(host), str(hv.get("ansible_host") or host)}
        if hv.get("dflash_fleet_address"):
            names.add(str(hv.get("dflash_fleet_address")))
        for key in ("hostname", "fqdn", "nodename"):
            if facts.get(key):
                names.add(str(facts[key]))
        for key in ("all_ipv4_addresses", "all_ipv6_addresses"):
            names |= {str(a) for a in facts.get(key) or []}
        out[str(host)] = sorted(names)
    return out


def dflash_rollout_batches(hosts, serial):
    return _rollout.batches(_plain(hosts), _plain(serial))


def dflash_rollout_later(batches, host):
    """The hosts of the batches after ``host``'s."""
    return _rollout.later_hosts(_plain(batches), str(host))


def dflash_rollout_serial_errors(serial):
    return _rollout.check_serial(_plain(serial))


def dflash_multinode_check(fleet, run_hosts, addresses=None, batches=None, serial=None):
    """{errors, warnings, groups} of the instances that span hosts."""
    fleet = _plain(fleet)
    return _mn.validate_fleet({h: v.get("instances") for h, v in fleet.items()}, _plain(run_hosts),
                              _plain(addresses), _plain(batches), _plain(serial))


def dflash_multinode_peers(fleet, host):
    fleet = _plain(fleet)
    return _mn.peer_hosts({h: v.get("instances") for h, v in fleet.items()}, str(host))


def dflash_router_workers(fleet):
    return _router.workers(_plain(fleet))


def dflash_router_reach_errors(workers, hostvars, hosts, what="the router"):
    """Workers the router (or Prometheus) on those hosts cannot reach (loopback only, another machine)."""
    where = {h: v["address"] for h, v in dflash_rollout_fleet(hostvars, hosts).items()}
    return _router.reach_errors(_plain(workers), where, what)


def dflash_router_api_key(fleet, workers):
    return _router.worker_api_key(_plain(fleet), _plain(workers))


def dflash_router_errors(settings, workers, own_instances=()):
    return _router.check_settings(_plain(settings), _plain(workers), _plain(own_instances))


def dflash_router_args(settings, workers):
    return _router.router_args(_plain(settings), _plain(workers))


def dflash_rollout_summary_lines(rows):
    return _rollout.summary_lines(_plain(rows))


class FilterModule:
    def filters(self):
        return {
            "dflash_rollout_fleet": dflash_rollout_fleet,
            "dflash_rollout_addresses": dflash_rollout_addresses,
            "dflash_rollout_routers": dflash_rollout_routers,
            "dflash_rollout_router_endpoints": dflash_rollout_router_endpoints,
            "dflash_rollout_batches": dflash_rollout_batches,
            "dflash_rollout_later": dflash_rollout_later,
            "dflash_rollout_serial_errors": dflash_rollout_serial_errors,
            "dflash_rollout_summary_lines": dflash_rollout_summary_lines,
            "dflash_multinode_check": dflash_multinode_check,
            "dflash_multinode_peers": dflash_multinode_peers,
            "dflash_router_workers": dflash_router_workers,
            "dflash_router_errors": dflash_router_errors,
            "dflash_router_reach_errors": dflash_router_reach_errors,
            "dflash_router_api_key": dflash_router_api_key,
            "dflash_router_args": dflash_router_args,
        }
