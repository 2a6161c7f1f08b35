"""The gate: requested GPUs (present, healthy, free) and the layers' CUDA against the driver."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_fingerprint.tables import (
    BUSY_THRESHOLD_MIB,
    EXCLUSIVE_CONTEXT_MIB,
    MIN_DRIVER,
    MINOR_COMPAT_DRIVER,
    SM_MAX_CUDA_MAJOR,
    SM_MIN_CUDA,
)
from ansible.module_utils.dflash_fingerprint.values import _is_l4t, _range_text, version_ge, vtuple


def _foreign(gpu, own_unit=None):
    procs = gpu.get("processes") or []
    return [p for p in procs if not (own_unit and p.get("unit") == own_unit)]


def gpu_busy_reason(gpu: dict, own_unit=None, threshold_mib=BUSY_THRESHOLD_MIB) -> str | None:
    """Why a GPU is busy (foreign processes, or memory in use), or None when free."""
    others = _foreign(gpu, own_unit)
    foreign = [p for p in others if (p.get("type") or "C") != "G"]
    # memory explained by listed processes that do not make the GPU busy: ours and display (G) ones
    listed_mib = sum(p.get("used_mib") or 0 for p in (gpu.get("processes") or []) if p not in foreign)
    used = gpu.get("memory_used_mib")
    total = gpu.get("memory_total_mib")
    mem = f"{used} of {total} MiB used" if used is not None else "memory use unknown"
    if foreign:
        who = ", ".join(f"pid {p.get('pid')} {p.get('name') or '?'}"
                        + (f" ({p['used_mib']} MiB)" if p.get("used_mib") is not None else "")
                        + (f" [{p['unit']}]" if p.get("unit") else "") for p in foreign)
        return f"busy: {mem} by foreign process(es): {who}"
    if used is not None and used - listed_mib >= threshold_mib:
        return f"busy: {mem} with no listed process (another container or a MIG/vGPU tenant?)"
    return None


def check_requested_gpus(fingerprint: dict, requests: list[dict]) -> list[str]:
    """Errors for GPUs the instances ask for that are missing, unhealthy or busy.

    ``requests``: ``[{"instance": name, "gpus": [int], "allow_busy": bool}]`` (optional keys:
    ``unit`` — the instance's own systemd unit, whose processes do not count as foreign;
    ``busy_threshold_mib``). Each error names the instance and the GPU; the caller adds the host.
    """
    errors = []
    gpus = {g.get("index"): g for g in (fingerprint or {}).get("gpus", []) if g.get("index") is not None}
    present = _range_text(gpus)
    for req in requests or []:
        name = req.get("instance", "?")
        own_unit = req.get("unit") or f"dflash-{name}.service"
        threshold = req.get("busy_threshold_mib", BUSY_THRESHOLD_MIB)
        for idx in req.get("gpus") or []:
            g = gpus.get(idx)
            if g is None:
                why = f"host has GPUs {present}" if gpus else "host has no usable GPUs"
                probs = (fingerprint or {}).get("problems") or []
                if not gpus and probs:
                    why += f" ({'; '.join(probs)})"
                errors.append(f"instance {name}: GPU {idx} is missing ({why})")
                continue
            label = f"GPU {idx} ({g.get('name') or 'unknown model'})"
            if not g.get("healthy", True):
                errors.append(f"instance {name}: {label} is unhealthy: {g.get('problem') or 'unknown reason'}")
                continue
            if g.get("mig_mode") == "enabled":
                sizes = [d.get("memory_total_mib") for d in g.get("mig_devices") or [] if d.get("memory_total_mib")]
                errors.append(
                    f"instance {name}: {label} has MIG mode enabled ({len(g.get('mig_devices') or [])} MIG "
                    f"device(s){', largest ' + str(max(sizes)) + ' MiB' if sizes else ''}): a server on it gets "
                    f"one MIG slice, not the GPU; disable MIG (nvidia-smi -i {idx} -mig 0, then reset the GPU) "
                    f"or pick a GPU without MIG")
                continue
            mode = g.get("compute_mode")
            if mode == "Prohibited":
                errors.append(f"instance {name}: {label} is in compute mode Prohibited: no process may create a "
                              f"CUDA context on it (nvidia-smi -i {idx} -c DEFAULT)")
                continue
            if mode in ("Exclusive_Process", "Exclusive_Thread"):
                holder = gpu_busy_reason(g, own_unit, EXCLUSIVE_CONTEXT_MIB)
                if holder:  # sharing is impossible: allow_busy does not lift this
                    errors.append(f"instance {name}: {label} is in compute mode {mode} and already {holder}: "
                                  f"the server cannot create its CUDA context there (stop that process, or "
                                  f"nvidia-smi -i {idx} -c DEFAULT)")
                    continue
            if not req.get("allow_busy"):
                reason = gpu_busy_reason(g, own_unit, threshold)
                if reason:
                    errors.append(f"instance {name}: {label} is {reason} "
                                  f"(set allow_busy_gpus: true to share it)")
    return errors


def requests_from_instances(instances) -> list[dict]:
    """dflash_instances items -> check_requested_gpus requests. Malformed items are skipped here:
    the instances stage's validation reports them (all placement errors at once)."""
    out = []
    for i, inst in enumerate(instances or []):
        if not isinstance(inst, dict):
            continue
        gpus = inst.get("gpus")
        if not isinstance(gpus, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            continue
        name = inst.get("name") if isinstance(inst.get("name"), str) and inst.get("name") else f"#{i + 1}"
        out.append({"instance": name, "gpus": list(gpus), "allow_busy": inst.get("allow_busy_gpus") is True})
    return out


_CU_PATTERNS = (re.compile(r"\+cu(\d{2,3})\b"), re.compile(r"/whl/(?:nightly/|test/)?cu(\d{2,3})\b"))


def cuda_from_tag(tag) -> str | None:
    """'128' -> '12.8', '130' -> '13.0', '92' -> '9.2'."""
    tag = str(tag)
    return f"{tag[:-1]}.{tag[-1]}" if tag.isdigit() and len(tag) >= 2 else None


def layer_cuda(layer: dict) -> str | None:
    """A layer's declared `cuda: "12.8"`, else inferred from `+cu128` pins / `.../whl/cu128` index URLs."""
    if not isinstance(layer, dict):
        return None
    if layer.get("cuda"):
        return str(layer["cuda"]).strip()
    found = set()

    def walk(value):
        if isinstance(value, dict):
            for k, v in value.items():
                if k not in ("name", "path", "existing_path", "env", "python", "parent"):
                    walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            for pat in _CU_PATTERNS:
                for m in pat.finditer(value):
                    c = cuda_from_tag(m.group(1))
                    if c:
                        found.add(c)
    walk(layer)
    if not found:
        return None
    return max(found, key=vtuple)


def min_driver_for(cuda: str) -> str | None:
    key = ".".join(str(x) for x in vtuple(cuda)[:2])
    if key in MIN_DRIVER:
        return MIN_DRIVER[key]
    # An unlisted minor (e.g. 12.7): the next listed one above it.
    above = sorted((k for k in MIN_DRIVER if vtuple(k) >= vtuple(key)), key=vtuple)
    return MIN_DRIVER[above[0]] if above else None


def _gpu_label(fp, gpus=None):
    gpus = gpus if gpus is not None else [g for g in fp.get("gpus", []) if g.get("index") is not None]
    models = {}
    for g in gpus:
        models.setdefault((g.get("name") or "unknown model", g.get("sm")), []).append(g.get("index"))
    return "; ".join(f"GPU {_range_text(ix)} {name}" + (f" (SM {sm})" if sm else "")
                     for (name, sm), ix in models.items()) or "no GPUs"


def check_driver_compat(fingerprint: dict, layers: list, host: str = "host",
                        allow_minor_version_compat: bool = False) -> list[str]:
    """Refusals when a layer's CUDA wheels need a newer driver, or cannot run this host's SMs."""
    fp = fingerprint or {}
    errors = []
    driver = fp.get("driver_version")
    driver_cuda = fp.get("driver_cuda_version")
    gpus = [g for g in fp.get("gpus", []) if g.get("index") is not None]
    needing = [(layer.get("name", "?") if isinstance(layer, dict) else "?") for layer in layers or []
               if layer_cuda(layer)]
    if needing and not gpus:
        why = "; ".join(fp.get("problems") or []) or "nvidia-smi listed none"
        errors.append(f"{host}: no usable NVIDIA GPU ({why}), but layer(s) {', '.join(needing)} install CUDA "
                      f"wheels (driver {driver or 'unknown'}, CUDA {driver_cuda or 'unknown'})")
    for layer in layers or []:
        cuda = layer_cuda(layer)
        if not cuda:
            continue
        lname = layer.get("name", "?") if isinstance(layer, dict) else "?"
        need_driver = min_driver_for(cuda)
        if not driver:
            why = (fp.get("null_reasons") or {}).get("driver_version") or "; ".join(fp.get("problems") or []) \
                or "no driver found"
            errors.append(f"{host}: layer {lname!r} installs CUDA {cuda} wheels (driver >= {need_driver}) "
                          f"but the host's driver is unknown: {why}")
            continue
        # The CUDA version nvidia-smi prints is the driver's own word (also for Jetson's 540 branch, which
        # the x86_64 minimum-driver table does not know); the table is for when it was inferred.
        printed = fp.get("driver_cuda_source") == "nvidia-smi" and bool(driver_cuda)
        ok = True
        if driver_cuda and not version_ge(driver_cuda, cuda) or \
                need_driver and not printed and not version_ge(driver, need_driver):
            ok = False
        if not ok and allow_minor_version_compat:
            major = str(vtuple(cuda)[0]) if vtuple(cuda) else ""
            floor = MINOR_COMPAT_DRIVER.get(major)
            if floor and version_ge(driver, floor):
                ok = True
        if not ok and driver_cuda:
            errors.append(
                f"{host}: {_gpu_label(fp, gpus)}: driver {driver} supports CUDA up to {driver_cuda}, "
                f"but layer {lname!r} installs CUDA {cuda} wheels (need driver >= {need_driver}); "
                f"upgrade the driver or use CUDA <= {driver_cuda} wheels")
        elif not ok:
            why = (fp.get("null_reasons") or {}).get("driver_cuda_version") or "nvidia-smi printed none"
            fix = (f"use wheels for the JetPack's CUDA (see nvidia-smi or the JetPack release), or a JetPack "
                   f"with CUDA >= {cuda}") if _is_l4t(driver) else "upgrade the driver"
            errors.append(
                f"{host}: {_gpu_label(fp, gpus)}: driver {driver} (the CUDA version it supports is unknown: "
                f"{why}), but layer {lname!r} installs CUDA {cuda} wheels"
                + ("" if _is_l4t(driver) else f" (need driver >= {need_driver})") + f"; {fix}")
        for g in gpus:
            sm = g.get("sm")
            if not sm:
                continue
            need = SM_MIN_CUDA.get(sm)
            if need and not version_ge(cuda, need):
                errors.append(f"{host}: GPU {g['index']} {g.get('name')} is SM {sm}, which needs CUDA >= {need}, "
                              f"but layer {lname!r} installs CUDA {cuda} wheels (driver {driver}, "
                              f"CUDA {driver_cuda or '?'})")
                break
            max_major = SM_MAX_CUDA_MAJOR.get(sm) or SM_MAX_CUDA_MAJOR.get(sm.split(".")[0])
            if max_major and vtuple(cuda)[0] > max_major:
                errors.append(f"{host}: GPU {g['index']} {g.get('name')} is SM {sm}, dropped after CUDA "
                              f"{max_major}.x, but layer {lname!r} installs CUDA {cuda} wheels")
                break
    return errors


def gate(fingerprint: dict, layers: list, requests: list, host: str = "host",
         allow_minor_version_compat: bool = False) -> list[str]:
    """All refusals for one host, each naming the host."""
    errors = check_driver_compat(fingerprint, layers, host, allow_minor_version_compat)
    errors += [f"{host}: {e}" for e in check_requested_gpus(fingerprint, requests)]
    return errors
