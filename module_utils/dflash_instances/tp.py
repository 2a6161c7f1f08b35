"""Tensor parallel on one host and across hosts: the instance fields, their checks on one host,
the facts the tensor-parallel rules read, and the launch flags.

Pure functions, no Ansible import. Called by module_utils/dflash_instances/ through one-line hooks
(validation, rule context, launch arguments, host facts); the smoke record of a node rank > 0 (it has no HTTP
API) is dflash_release/smoke.py's. The checks across hosts (ranks, addresses, batches) are in
dflash_rollout/multinode.py.

Instance fields (besides `gpus` and `tp` of the instances stage):
  nnodes          hosts one instance spans (default 1); tp = len(gpus) * nnodes
  node_rank       this host's rank, 0 .. nnodes-1 (rank 0 serves the HTTP API)
  dist_init_addr  "host:port" of rank 0's rendezvous (torch.distributed TCP store), the same on every rank
  metrics         --enable-metrics (default true): /metrics for Prometheus
"""

from __future__ import annotations

import json
import os
import re

from ansible.module_utils.dflash_common.argv import split_flags
from ansible.module_utils.dflash_fingerprint.topo import describe_links, gpu_set_facts

TP_KEYS = {"nnodes", "node_rank", "dist_init_addr", "metrics"}
# flags set from these fields: extra_args / pin_flags must not set them too
TP_MANAGED_FLAGS = {
    "--nnodes": "nnodes", "--node-rank": "node_rank", "--dist-init-addr": "dist_init_addr",
    "--nccl-init-addr": "dist_init_addr",
}
PORT_MIN, PORT_MAX = 1024, 65535
# sglang 0.5.11 with --enable-dp-attention also binds dist_init_port + 1 .. + 5 on rank 0 (PortArgs)
DP_ATTENTION_EXTRA_PORTS = 5
ADDR_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)):(?P<port>\d+)$")


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def nnodes_of(inst) -> int:
    """The instance's node count (1 when unset or not a positive integer: the checks say why)."""
    n = (inst or {}).get("nnodes", 1)
    return n if _is_int(n) and n >= 1 else 1


def parse_addr(addr):
    """'10.0.0.1:29500' / 'node-a:29500' / '[fd00::1]:29500' -> (host, port); ValueError says why."""
    if not isinstance(addr, str) or not addr:
        raise ValueError(f"must be 'host:port', got {addr!r}")
    m = ADDR_RE.match(addr.strip())
    if not m:
        raise ValueError(f"{addr!r} is not 'host:port' (an IPv6 address goes in brackets: '[fd00::1]:29500')")
    port = int(m.group("port"))
    if not PORT_MIN <= port <= PORT_MAX:
        raise ValueError(f"port {port} of {addr} is out of range {PORT_MIN}..{PORT_MAX} (rank 0 binds it as a "
                         "non-root user)")
    return (m.group("v6") or m.group("host")), port


def _flags_in(raw):
    """Flags an instance sets itself (extra_args and pin_flags)."""
    out = set(split_flags(raw.get("extra_args") or []))
    for f in (raw.get("pin_flags") or {}) if isinstance(raw.get("pin_flags"), dict) else {}:
        out.add(str(f))
    return out


def reserved_ports(inst):
    """Ports rank 0 of a multi-node instance binds on its host besides the HTTP port -> [(port, what)]."""
    if nnodes_of(inst) <= 1 or not inst.get("dist_init_addr"):
        return []
    try:
        _host, port = parse_addr(inst["dist_init_addr"])
    except ValueError:
        return []
    out = [(port, "dist_init_addr (torch.distributed rendezvous)")]
    if "--enable-dp-attention" in _flags_in(inst):
        out += [(port + i, f"dist_init_addr port + {i} (DP attention)") for i in range(1, DP_ATTENTION_EXTRA_PORTS + 1)]
    return out


def heads_error(tp, model_facts):
    """The model's attention heads must split evenly over tp ranks (sglang's attention layers assert it)."""
    if not model_facts or not _is_int(tp) or tp < 1:
        return None
    heads, kv = model_facts.get("num_attention_heads"), model_facts.get("num_key_value_heads")
    if _is_int(heads) and heads % tp:
        ok = [t for t in (1, 2, 4, 8, 16, 32, 64) if heads % t == 0 and (not _is_int(kv) or kv % t == 0 or t % kv == 0)]
        return (f"tp {tp} does not divide the model's {heads} attention heads "
                f"({model_facts.get('source', 'config.json')}): sglang refuses to start; tp can be {ok}")
    if _is_int(kv) and kv > 0 and (kv % tp if kv >= tp else tp % kv):
        return (f"tp {tp} and the model's {kv} key/value heads do not split evenly (kv heads must be a multiple "
                f"of tp, or tp a multiple of them; {model_facts.get('source', 'config.json')})")
    return None


def validate_instance(raw, inst, fingerprint=None, host_facts=None, all_instances=()):
    """Checks of one host's instance for the tensor-parallel fields -> [(field, message)].

    raw: the inventory item; inst: it with the stage's defaults (tp, lists); all_instances: the host's
    instances (their HTTP ports must not meet a rendezvous port)."""
    errs = []

    def err(field, msg):
        errs.append((field, msg))

    n = raw.get("nnodes", 1)
    if not _is_int(n) or n < 1:
        err("nnodes", f"must be a positive integer (hosts the instance spans), got {n!r}")
        n = 1
    rank = raw.get("node_rank")
    addr = raw.get("dist_init_addr")
    if n > 1:
        if rank is None:
            err("node_rank", f"is required with nnodes {n}: this host's rank, 0..{n - 1} "
                                      "(rank 0 serves the HTTP API)")
        elif not _is_int(rank) or not 0 <= rank < n:
            err("node_rank", f"must be an integer 0..{n - 1} (nnodes {n}), got {rank!r}")
        if not addr:
            err("dist_init_addr", f"is required with nnodes {n}: 'host:port' of the rank-0 host's "
                                           "rendezvous, the same on every rank (e.g. '10.0.0.1:29500')")
        else:
            try:
                parse_addr(addr)
            except ValueError as exc:
                err("dist_init_addr", str(exc))
    else:
        if rank not in (None, 0):
            err("node_rank", f"{rank!r} needs nnodes > 1 (set nnodes to the number of hosts)")
    metrics = raw.get("metrics", True)
    if not isinstance(metrics, bool):
        err("metrics", f"must be true or false, got {metrics!r}")
    elif metrics is False and "--enable-metrics" in _flags_in(raw):
        err("metrics", "is false but extra_args / pin_flags have --enable-metrics")
    for flag in sorted(_flags_in(raw) & set(TP_MANAGED_FLAGS)):
        err("extra_args" if flag in {str(a).split("=", 1)[0] for a in raw.get("extra_args") or []}
                     else f"pin_flags.{flag}",
                     f"{flag} is set from the field '{TP_MANAGED_FLAGS[flag]}'; set that field instead")
    # rendezvous ports of rank 0 against the HTTP ports of this host's instances and foreign listeners
    if n > 1 and rank == 0:
        ports = {i.get("port"): i.get("name") for i in all_instances or () if isinstance(i, dict)}
        for port, what in reserved_ports(raw):
            if port in ports:
                err("dist_init_addr", f"port {port} ({what}) is the HTTP port of instance "
                                               f"'{ports[port]}' on this host")
            for lis in (host_facts or {}).get("listeners") or []:
                unit = str(lis.get("unit") or "")
                if lis.get("port") == port and not unit.startswith("dflash-") and lis.get("user") != "sglang":
                    who = ", ".join(x for x in (f"pid {lis['pid']}" if lis.get("pid") else "", str(lis.get("comm") or ""),
                                                f"unit {unit}" if unit else "") if x)
                    err("dist_init_addr", f"port {port} ({what}) is already listening on the host "
                                                   f"({who or 'unknown owner'}) and it is not one of our dflash-* units")
                    break
    tp = inst.get("tp")
    model = (host_facts or {}).get("models", {}).get(raw.get("model_path")) if host_facts else None
    msg = heads_error(tp, model)
    if msg:
        err("tp", msg)
    return errs


# --------------------------------------------------------------------------- rules

def rule_facts(inst, fingerprint):
    """The `tp.*` facts of the rules table for one instance (docs/fallbacks.md)."""
    gpus = [g for g in (inst.get("gpus") or []) if _is_int(g)]
    topo = (fingerprint or {}).get("topology") if isinstance(fingerprint, dict) else None
    f = gpu_set_facts(topo, gpus)
    multi = len(set(gpus)) > 1
    over_two = None
    if len(set(gpus)) > 2 and f["all_nvlink"] is not None:
        over_two = not f["all_nvlink"]
    elif len(set(gpus)) <= 2:
        over_two = False
    return {
        "tp.multi_gpu": multi,
        "tp.gpus": sorted(set(gpus)),
        "tp.nnodes": nnodes_of(inst),
        "tp.links": describe_links(f) if f["known"] else None,
        "tp.worst_link": f["worst"],
        "tp.all_nvlink": f["all_nvlink"],
        "tp.pcie_over_two": over_two if multi else False,
        "tp.p2p_ok": f["p2p_ok"] if multi else None,
        "tp.p2p_bad": f["p2p_bad"],
        "tp.cross_numa": f["cross_numa"] if multi else None,
        "tp.numa_nodes": f["numa_nodes"],
        "tp.numa_groups": "; ".join(f"node {k}: GPUs {', '.join(str(g) for g in v)}"
                                    for k, v in sorted(f["numa_groups"].items())) or None,
    }


# --------------------------------------------------------------------------- arguments

def launch_args(inst):
    """Flags from the fields: --enable-metrics, and --nnodes/--node-rank/--dist-init-addr when nnodes > 1."""
    args = []
    if inst.get("metrics", True) is not False and "--enable-metrics" not in _flags_in(inst):
        args.append("--enable-metrics")
    n = nnodes_of(inst)
    if n > 1:
        args += ["--nnodes", str(n), "--node-rank", str(inst.get("node_rank", 0)),
                 "--dist-init-addr", str(inst.get("dist_init_addr"))]
    return args


# --------------------------------------------------------------------------- host facts

def model_facts(instances, read=None):
    """{model_path: {num_attention_heads, num_key_value_heads, source}} from each model's config.json
    (a text_config of a multimodal config counts); paths without a readable config are left out."""
    def _read(path):
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError:
            return None
    read = read or _read
    out = {}
    for inst in instances or []:
        p = inst.get("model_path") if isinstance(inst, dict) else None
        if not isinstance(p, str) or not p.startswith("/") or p in out:
            continue
        text = read(os.path.join(p, "config.json"))
        if text is None:
            continue
        try:
            cfg = json.loads(text)
        except ValueError:
            continue
        if not isinstance(cfg, dict):
            continue
        src = "config.json"
        if not _is_int(cfg.get("num_attention_heads")) and isinstance(cfg.get("text_config"), dict):
            cfg, src = cfg["text_config"], "config.json text_config"
        heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
        if _is_int(heads):
            out[p] = {"num_attention_heads": heads, "num_key_value_heads": kv if _is_int(kv) else None,
                      "source": f"{p}/{src}"}
    return out
