"""Plan a benchmark run on one host: the deployed release, the base instance, GPUs, ports, flags.

Input: the current release's manifest, the host's listening sockets (dflash_instances.read_listeners),
its fingerprint (free GPUs: dflash_fingerprint.check_requested_gpus), the drafts' block sizes and the
normalized configurations (dflash_bench_matrix). Output: one entry per configuration with its unit
name, port, GPUs, full command line and env file text (dflash_release.render_env_file), the waves
and the cells. Every problem of the host comes out at once, before anything is started.
Pure functions; no Ansible import.
"""

from __future__ import annotations

from ansible.module_utils.dflash_bench import matrix as mx
from ansible.module_utils.dflash_bench.flags import FlagsError, config_command
from ansible.module_utils.dflash_common.argv import get_flag
from ansible.module_utils.dflash_common.net import instance_address
from ansible.module_utils.dflash_fingerprint.gate import check_requested_gpus
from ansible.module_utils.dflash_release.envfile import render_env_file
from ansible.module_utils.dflash_release.manifest import ReleaseError, fingerprint_digest
from ansible.module_utils.dflash_release.smoke import expected_algorithm

BLOCK_FLAGS = ("--speculative-dflash-block-size", "--speculative-num-draft-tokens")
DEFAULT_BLOCK = 16  # sglang's DFlash block when neither the flags nor the draft's config.json say


def unit_name(config: str) -> str:
    return f"dflash-bench-{config}.service"


def pick_base(manifest: dict, wanted: str | None, host: str):
    """(name, entry) of the release instance whose flags the configurations start from: the one
    named, else the first speculative one, else the first."""
    insts = manifest.get("instances") or {}
    if not insts:
        raise mx.MatrixError([f"{host}: release {manifest.get('id')} has no instance to start from"])
    if wanted:
        if wanted not in insts:
            raise mx.MatrixError([(f"{host}: dflash_bench_base_instance: {wanted!r} is not an instance of release "
                                   f"{manifest.get('id')} (it has: {', '.join(sorted(insts))})")])
        return wanted, insts[wanted]
    for name in sorted(insts):
        if expected_algorithm(insts[name].get("args") or []):
            return name, insts[name]
    name = min(insts)
    return name, insts[name]


def free_gpus(fingerprint: dict) -> list:
    """Indexes of the GPUs nothing runs on (the fingerprint's busy rule: processes, memory in use)."""
    out = []
    for g in (fingerprint or {}).get("gpus") or []:
        idx = g.get("index")
        if idx is not None and not check_requested_gpus(fingerprint, [{"instance": "bench", "gpus": [idx]}]):
            out.append(idx)
    return sorted(out)


def free_ports(listeners, low: int, high: int, count: int) -> list:
    used = {int(x["port"]) for x in listeners or []}
    return [p for p in range(int(low), int(high) + 1) if p not in used][:count]


def block_size(args, draft_blocks: dict, draft: str | None):
    """(block, source) of the draft a DDTREE configuration runs with."""
    for flag in BLOCK_FLAGS:
        v = get_flag(args, flag)
        if v not in (None, True):
            try:
                return int(v), flag
            except ValueError:
                pass
    info = (draft_blocks or {}).get(draft) or {}
    if info.get("block_size"):
        return int(info["block_size"]), f"{draft}/config.json"
    return DEFAULT_BLOCK, "sglang's default (no block size in the flags or the draft's config.json)"


def plan(host, manifest, release_path, configs, fingerprint, listeners, draft_blocks, opts) -> dict:
    """The run plan. ``opts``: base_instance, gpus, allow_busy_gpus, port_range [lo, hi], parallel,
    extra_args, workloads, concurrency, repeats, start_timeout, cell_timeout. Raises MatrixError (all errors)."""
    errors = []
    base_name, base = pick_base(manifest, opts.get("base_instance"), host)
    base = dict(base, name=base_name)
    errors += mx.check_workloads(opts.get("workloads"), opts.get("concurrency"), host)
    errors += mx.check_repeats(opts.get("repeats", 1), host)
    fp_gpus = {g.get("index") for g in (fingerprint or {}).get("gpus") or [] if g.get("index") is not None}
    pool = [int(g) for g in opts.get("gpus") or []] or free_gpus(fingerprint)
    started = [c for c in configs if not c.get("running")]
    if opts.get("gpus") or any(c.get("gpus") for c in started):
        asked = sorted({*pool, *(g for c in started for g in c.get("gpus") or [])})
        for err in check_requested_gpus(fingerprint or {}, [{"instance": "bench", "gpus": asked,
                                                              "allow_busy": bool(opts.get("allow_busy_gpus"))}]):
            errors.append(f"{host}: dflash_bench_gpus: {err.split(': ', 1)[-1]}"
                          + ("" if "busy" not in err else " (dflash_bench_allow_busy_gpus: true shares it)"))
    elif started and not pool:
        errors.append(f"{host}: dflash_bench_gpus: no free GPU on the host (GPUs: {sorted(fp_gpus) or 'none'}); "
                      "name GPUs in dflash_bench_gpus with dflash_bench_allow_busy_gpus: true to share a busy one")
    low, high = (opts.get("port_range") or [30100, 30199])[:2]
    ports = free_ports(listeners, low, high, len(started))
    if len(ports) < len(started):
        errors.append(f"{host}: dflash_bench_ports: {len(started)} free ports needed in {low}-{high}, "
                      f"{len(ports)} free")
    wave_list = mx.waves(configs, opts.get("parallel", 1))
    instances = manifest.get("instances") or {}
    out, slot = [], 0
    for wave_no, wave in enumerate(wave_list):
        for k, cfg in enumerate(wave):
            where = f"{host}: configuration {cfg['name']}"
            entry = {k2: v for k2, v in cfg.items() if k2 not in ("extra_args", "env")}
            entry.update(wave=wave_no, extra_args=cfg.get("extra_args") or [])
            if cfg.get("running"):
                inst = instances.get(cfg["running"])
                if inst is None:
                    errors.append(f"{where}: field 'running': release {manifest.get('id')} has no instance "
                                  f"{cfg['running']!r} (it has: {', '.join(sorted(instances))})")
                    continue
                args = [str(a) for a in inst.get("args") or []]
                port, url = instance_address(inst)
                entry.update(unit=inst.get("unit"), args=args, env=inst.get("env") or {}, base_url=url,
                             port=port, gpus=None, changes=[], overrides=[],
                             algorithm=expected_algorithm(args) or "NONE")
                out.append(entry)
                continue
            tp = cfg.get("tp") or len(cfg.get("gpus") or []) or 1
            gpus = cfg.get("gpus") or ([pool[(k * tp + j) % len(pool)] for j in range(tp)] if pool else [])
            if len(set(gpus)) < tp:
                errors.append(f"{where}: field 'tp': {tp} needs {tp} GPUs; the bench may use {pool or 'none'}")
                continue
            port = ports[slot] if slot < len(ports) else None
            slot += 1
            try:
                cmd = config_command(base, cfg, port, gpus, opts.get("extra_args") or [])
            except FlagsError as exc:
                errors.append(f"{host}: {exc}")
                continue
            if cfg["algorithm"] == "DDTREE":
                draft = get_flag(cmd["args"], "--speculative-draft-model-path")
                block, source = block_size(cmd["args"], draft_blocks, draft)
                entry["block_size"] = block
                if cfg["budget"] + 1 > block:
                    errors.append(f"{where}: field 'budget': {cfg['budget']} + 1 is above the draft's block {block} "
                                  f"({source}); the patched server refuses it: lower the budget or set "
                                  f"draft_model_path to a draft with a block of {cfg['budget'] + 1} or more")
            try:
                env_text = render_env_file(cmd["env"], cmd["args"], where)
            except ReleaseError as exc:
                errors.append(str(exc))
                continue
            entry.update(unit=unit_name(cfg["name"]), port=port, gpus=gpus, tp=tp, args=cmd["args"], env=cmd["env"],
                         env_text=env_text, changes=cmd["changes"], overrides=cmd["overrides"],
                         base_url=f"http://127.0.0.1:{port}")
            out.append(entry)
    if errors:
        raise mx.MatrixError(errors)
    order = [[c["name"] for c in w] for w in wave_list]
    repeats = int(opts.get("repeats", 1))
    cell_list = mx.cells(wave_list, opts.get("workloads"), opts.get("concurrency"), repeats)
    per_config = len(opts.get("workloads") or []) * len(opts.get("concurrency") or []) * repeats
    bound = int(opts.get("start_timeout", 300)) + int(opts.get("cell_timeout", 120)) * per_config * \
        max(len(w) for w in wave_list) + 120
    return {
        "release": {"id": manifest.get("id"), "path": release_path, "created": manifest.get("created"),
                    "fingerprint_digest": manifest.get("fingerprint_digest"),
                    "fingerprint_digest_now": fingerprint_digest(fingerprint) if fingerprint else None,
                    "toolkit": manifest.get("toolkit"), "sglang": (manifest.get("tree") or {}).get("sglang_version"),
                    "patches": [p.get("name") for p in (manifest.get("tree") or {}).get("patches") or []]},
        # the interpreter its servers run: the base instance's own sglang version's venv (an instance of another
        # version than the host's), else the release's
        "base": {"name": base_name, "args": base.get("args"), "env": base.get("env"),
                 "applied": base.get("applied") or [],
                 "python": (f"{base['venv'].rstrip('/')}/bin/python" if base.get("venv") not in (None, manifest.get("venv"))
                            else f"{release_path}/venv/bin/python"),
                 "sglang": base.get("sglang_version") or (manifest.get("tree") or {}).get("sglang_version")},
        "gpu_pool": pool,
        "configurations": out,
        "waves": order,
        "cells": cell_list,
        "lifetime_s": bound,
    }
