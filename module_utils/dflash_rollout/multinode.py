"""Instances that span hosts (nnodes > 1): the checks across hosts, before anything changes.

Pure functions, no Ansible import (filter_plugins/dflash_fleet.py calls them once per run, on the
controller, with every host's `dflash_instances`). The checks of one host's fields (node_rank in
range, dist_init_addr present and well formed, rendezvous port free) are in dflash_instances/tp.py.

The members of a multi-node instance are the instances of the same name on several hosts. They must
agree on nnodes, dist_init_addr and the model setup, hold every rank 0..nnodes-1 exactly once,
all take part in the run, restart in the same rollout batch, and dist_init_addr must name the
rank-0 host. Every error names the hosts, the instance and the field.
"""

from __future__ import annotations

import ipaddress

from ansible.module_utils.dflash_instances.tp import nnodes_of, parse_addr

# fields every rank must agree on (sglang starts one model across the ranks)
SHARED_FIELDS = ("nnodes", "tp", "dist_init_addr", "model_path", "draft_model_path", "algorithm",
                 "context_length", "mem_fraction_static", "ddtree")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def groups(hosts_instances) -> dict:
    """{name: [(host, instance)]} for every instance name that has nnodes > 1 on some host."""
    by_name = {}
    for host in sorted(hosts_instances or {}):
        for inst in hosts_instances[host] or []:
            if isinstance(inst, dict) and isinstance(inst.get("name"), str):
                by_name.setdefault(inst["name"], []).append((host, inst))
    return {n: members for n, members in by_name.items()
            if any(_is_int(i.get("nnodes")) and i["nnodes"] > 1 for _h, i in members)}


def _shared(inst, field):
    if field == "tp":
        gpus = inst.get("gpus") if isinstance(inst.get("gpus"), list) else []
        return inst.get("tp") if inst.get("tp") is not None else len(gpus) * nnodes_of(inst)
    if field == "nnodes":
        return inst.get("nnodes", 1)
    return inst.get(field)


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def validate_fleet(hosts_instances, run_hosts=None, addresses=None, batches=None, serial=None) -> dict:
    """-> {errors: [str], warnings: [str], groups: {name: {ranks: {rank: host}, dist_init_addr, hosts}}}.

    hosts_instances: {host: dflash_instances} for every host of the inventory group (not just the run);
    run_hosts: the hosts of this run (after --limit); addresses: {host: [names and IPs it answers to]};
    batches: the rollout's host batches (lists of hosts, in order); serial: how they were cut (for messages)."""
    errors, warnings, summary = [], [], {}
    run = set(run_hosts) if run_hosts is not None else None
    addresses = addresses or {}
    for name, members in sorted(groups(hosts_instances).items()):
        hosts = [h for h, _ in members]
        label = f"instance '{name}'"
        # nnodes: rank 0's value is the reference (else the one most members have)
        counts = {}
        for h, i in members:
            counts.setdefault(repr(_shared(i, "nnodes")), []).append(h)
        ref0 = next((i for _h, i in members if i.get("node_rank") == 0), None)
        n = _shared(ref0, "nnodes") if ref0 is not None else \
            _shared(members[0][1], "nnodes") if len(counts) == 1 else \
            next(_shared(i, "nnodes") for _h, i in members
                 if repr(_shared(i, "nnodes")) == max(counts, key=lambda k: (len(counts[k]), k)))
        for h, i in members:
            if _shared(i, "nnodes") != n:
                errors.append(f"{h}: {label}: field 'nnodes': {_shared(i, 'nnodes')!r} here but {n!r} on "
                              f"{', '.join(counts[repr(n)])}: every rank of a multi-node instance sets the same nnodes")
        # ranks: each 0..n-1 exactly once
        ranks = {}
        for h, i in members:
            r = i.get("node_rank")
            if _is_int(r):
                ranks.setdefault(r, []).append(h)
        for r, hs in sorted(ranks.items()):
            for h in hs[1:]:
                errors.append(f"{h}: {label}: field 'node_rank': rank {r} is also claimed by {hs[0]} "
                              "(each rank 0..nnodes-1 on exactly one host)")
        if _is_int(n) and n > 1:
            missing = [r for r in range(n) if r not in ranks]
            if missing:
                have = ", ".join(f"{h} rank {i.get('node_rank')!r}" for h, i in members)
                errors.append(f"{', '.join(hosts)}: {label}: field 'node_rank': nnodes {n} needs ranks 0..{n - 1}, "
                              f"no host has rank {', '.join(str(r) for r in missing)} ({have}); add the instance "
                              "to the missing hosts' dflash_instances or lower nnodes")
            if len(members) > n:
                errors.append(f"{', '.join(hosts)}: {label}: field 'nnodes': {len(members)} hosts define the "
                              f"instance but nnodes is {n}")
        # the other shared fields against rank 0 (or the first member)
        ref_host, ref = next(((h, i) for h, i in members if i.get("node_rank") == 0), members[0])
        for field in SHARED_FIELDS[1:]:
            want = _shared(ref, field)
            for h, i in members:
                if h != ref_host and _shared(i, field) != want and not (field == "dist_init_addr" and not i.get(field)):
                    errors.append(f"{h}: {label}: field '{field}': {_shared(i, field)!r} here but {want!r} on "
                                  f"{ref_host}: every rank of a multi-node instance must agree")
        gpu_counts = {h: len(i.get("gpus") or []) for h, i in members if isinstance(i.get("gpus"), list)}
        if len(set(gpu_counts.values())) > 1:
            errors.append(f"{', '.join(hosts)}: {label}: field 'gpus': every rank needs the same number of GPUs "
                          f"(tp = GPUs per node x nnodes), got {', '.join(f'{h} {c}' for h, c in gpu_counts.items())}")
        # every member takes part in this run, when one does (a run limited to other hosts leaves it alone)
        if run is not None and run & set(hosts):
            for h, i in members:
                if h not in run:
                    errors.append(f"{h}: {label}: field 'node_rank': rank {i.get('node_rank')!r} is on {h}, which "
                                  f"this run leaves out (--limit {', '.join(sorted(run & set(hosts))) or '...'}): the "
                                  "ranks of a multi-node instance are deployed together; add it to the limit")
        # dist_init_addr names the rank-0 host
        addr = ref.get("dist_init_addr")
        rank0 = (ranks.get(0) or [None])[0]
        if addr and rank0:
            try:
                ahost, _port = parse_addr(addr)
            except ValueError:
                ahost = None
            known = {str(a) for a in addresses.get(rank0) or []}
            if ahost and known and ahost not in known:
                other = next((h for h, al in addresses.items() if h != rank0 and ahost in {str(a) for a in al or []}),
                             None)
                if other:
                    errors.append(f"{rank0}: {label}: field 'dist_init_addr': {addr} is {other}'s address, but rank 0 "
                                  f"runs on {rank0} (its rendezvous listens there)")
                elif _is_ip(ahost) and any(_is_ip(a) for a in known):
                    errors.append(f"{rank0}: {label}: field 'dist_init_addr': {ahost} is not an address of {rank0}, "
                                  f"the rank-0 host ({', '.join(sorted(a for a in known if _is_ip(a)))})")
                else:
                    warnings.append(f"{rank0}: {label}: field 'dist_init_addr': {ahost} is not one of the names this "
                                    f"inventory knows for the rank-0 host {rank0} ({', '.join(sorted(known))}); the other "
                                    "ranks must resolve it to that host")
        # same rollout batch
        if batches:
            where = {h: b for b, hs in enumerate(batches, 1) for h in hs}
            used = sorted({where[h] for h in hosts if h in where})
            if len(used) > 1:
                errors.append(f"{', '.join(hosts)}: {label}: field 'node_rank': the ranks fall in rollout batches "
                              f"{', '.join(f'{h} -> {where[h]}' for h in hosts if h in where)} of serial {serial!r}: "
                              "the ranks of a multi-node instance restart together (rank 0 waits for all); order the "
                              "hosts so they share a batch, or set dflash_rollout_serial")
        summary[name] = {"ranks": {str(r): hs[0] for r, hs in sorted(ranks.items())}, "dist_init_addr": addr,
                         "hosts": hosts}
    return {"errors": errors, "warnings": warnings, "groups": summary}


def peer_hosts(hosts_instances, host) -> list:
    """The other hosts holding a rank of one of `host`'s multi-node instances."""
    out = set()
    for members in groups(hosts_instances).values():
        hs = [h for h, _ in members]
        if host in hs:
            out |= set(hs) - {host}
    return sorted(out)
