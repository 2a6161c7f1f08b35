"""One fingerprint from every source (the design.md fact ``dflash_fingerprint``), each field with its source."""

from __future__ import annotations

import json
import re

from ansible.module_utils.dflash_fingerprint.parse import (
    parse_apps_csv,
    parse_glibc,
    parse_nvcc,
    parse_os_release,
    parse_proc_version,
    parse_query_csv,
    parse_smi_table,
    parse_smi_xml,
    parse_torch,
    torch_problems,
)
from ansible.module_utils.dflash_fingerprint.smi_errors import smi_error, unreachable_gpus
from ansible.module_utils.dflash_fingerprint.topo import parse_topology
from ansible.module_utils.dflash_fingerprint.values import (
    _is_l4t,
    _memory_slice_note,
    arch_of,
    cuda_of_driver,
    sm_from_name,
    vtuple,
)


def fingerprint_from_raw(raw: dict) -> dict:
    """Build the fact from a host's raw outputs (any subset of FILES). Never raises on odd input: a
    field that cannot be read is null (with its reason in ``null_reasons``) and the host gets a problem."""
    try:
        return _fingerprint_from_raw(raw)
    except Exception as exc:  # noqa: BLE001 - the last line of defence; the fuzz test keeps it unreached
        return {"gpu_count": 0, "gpus": [], "driver_version": None, "driver_cuda_version": None,
                "cuda_toolkits": [], "nvcc_version": None, "torch": None, "os": None, "glibc": None,
                "sources": [], "null_reasons": {"driver_version": "fingerprint parser error"},
                "problems": [(f"fingerprint parser error ({type(exc).__name__}: {exc}); please report this "
                              "capture folder")]}


def _fingerprint_from_raw(raw: dict) -> dict:
    raw = {k: v for k, v in (raw or {}).items() if isinstance(v, str)}
    meta = {}
    if raw.get("capture-meta.json"):
        try:
            meta = json.loads(raw["capture-meta.json"])
        except ValueError:
            meta = {}
    if not isinstance(meta, dict):
        meta = {}
    errors = {str(k): str(v) for k, v in (meta.get("errors") or {}).items()} \
        if isinstance(meta.get("errors"), dict) else {}
    problems: list[str] = []
    sources: list[str] = []

    table = parse_smi_table(raw.get("nvidia-smi.txt")) if "nvidia-smi.txt" in raw else None
    xml = parse_smi_xml(raw.get("nvidia-smi-q.xml")) if "nvidia-smi-q.xml" in raw else None
    query_text = raw.get("nvidia-smi-query.csv")
    query = parse_query_csv(query_text) if query_text is not None else None
    query_err = smi_error(query_text) if query_text else None
    apps_text = raw.get("nvidia-smi-apps.csv")
    apps = parse_apps_csv(apps_text) if apps_text is not None and not smi_error(apps_text) else None
    proc_driver = parse_proc_version(raw.get("proc-driver-nvidia-version.txt"))

    # The host-level reason when nvidia-smi gave no data.
    # Errors the capture recorded (exit codes): a file that still gave data is explained by its GPUs'
    # own problems (a lost GPU makes nvidia-smi exit non-zero after printing the others); when other
    # sources gave GPUs, the failing command is named.
    produced = {"nvidia-smi.txt": bool(table and table["gpus"]), "nvidia-smi-query.csv": bool(query),
                "nvidia-smi-q.xml": bool(xml and xml["gpus"]),
                "nvidia-smi-apps.csv": apps is not None and bool((apps_text or "").strip())}
    labels = {"nvidia-smi.txt": "nvidia-smi", "nvidia-smi-query.csv": "nvidia-smi --query-gpu",
              "nvidia-smi-apps.csv": "nvidia-smi --query-compute-apps", "nvidia-smi-q.xml": "nvidia-smi -q -x"}
    any_gpus = any(produced[k] for k in ("nvidia-smi.txt", "nvidia-smi-query.csv", "nvidia-smi-q.xml"))
    smi_errors = []
    for fname, err in (("nvidia-smi.txt", table and table["error"]), ("nvidia-smi-query.csv", query_err),
                       ("nvidia-smi-q.xml", xml and xml.get("error") if xml and not xml["gpus"] else None)):
        err = f"{labels[fname]}: {err}" if err and any_gpus else err
        if err and err not in smi_errors:
            smi_errors.append(err)
    for fname, err in errors.items():
        if not fname.startswith("nvidia-smi") or not err or produced.get(fname):
            continue
        err = f"{labels.get(fname, fname)}: {err}" if any_gpus else err
        if err not in smi_errors:
            smi_errors.append(err)

    if query:
        sources.append("nvidia-smi-query.csv")
    if xml and xml["gpus"]:
        sources.append("nvidia-smi-q.xml")
    if table and table["gpus"]:
        sources.append("nvidia-smi.txt")
    if apps is not None:
        sources.append("nvidia-smi-apps.csv")

    # --- GPUs: key by PCI bus id; the query CSV is the base, XML and table fill gaps.
    gpus: dict[str, dict] = {}
    order: list[str] = []

    def slot(bus, index=None, uuid=None):
        """The GPU's record: the same PCI bus id, else the same UUID (a source without the bus id),
        else a new one keyed by bus id or index."""
        key = bus or f"index:{index}"
        if key not in gpus and uuid:
            key = next((k for k, v in gpus.items() if v["uuid"] == uuid), key)
        if key not in gpus and index is not None:  # one of the two sources has no bus id
            key = next((k for k, v in gpus.items()
                        if v["index"] == index and (v["pci_bus_id"] is None or bus is None)), key)
        if key not in gpus:
            gpus[key] = {"index": index, "name": None, "uuid": None, "pci_bus_id": bus, "sm": None,
                         "sm_source": None, "arch": None, "arch_hint": None, "memory_total_mib": None,
                         "memory_used_mib": None, "processes": None, "problems": [], "warnings": [],
                         "null_reasons": {}, "mig_mode": None, "mig_devices": [], "compute_mode": None}
            order.append(key)
        return gpus[key]

    def take(g, src):
        """Fill g's gaps from one source's GPU (null reasons, MIG)."""
        for k, why in (src.get("null_reasons") or {}).items():
            g["null_reasons"].setdefault(k, why)
        if g["mig_mode"] is None and src.get("mig_mode"):
            g["mig_mode"] = src["mig_mode"]
        if not g["mig_devices"] and src.get("mig_devices"):
            g["mig_devices"] = src["mig_devices"]
        if g["pci_bus_id"] is None and src.get("pci_bus_id"):
            g["pci_bus_id"] = src["pci_bus_id"]
        if g["compute_mode"] is None and src.get("compute_mode"):
            g["compute_mode"] = src["compute_mode"]

    for q in query or []:
        g = slot(q["pci_bus_id"], q["index"], q["uuid"])
        for k in ("name", "uuid", "memory_total_mib", "memory_used_mib"):
            g[k] = q[k]
        if q["sm"]:
            g["sm"], g["sm_source"] = q["sm"], "compute_cap"
        if q["problem"]:
            g["problems"].append(q["problem"])
        take(g, q)
    table_by_bus = {t["pci_bus_id"]: t for t in (table or {}).get("gpus", [])}
    for pos, x in enumerate((xml or {}).get("gpus", [])):
        t = table_by_bus.get(x["pci_bus_id"])
        index = t["index"] if t else None
        if index is None and not query and not table_by_bus:
            index = pos
        g = slot(x["pci_bus_id"], index, x["uuid"])
        if g["index"] is None:
            g["index"] = index
        take(g, x)
        for k in ("name", "uuid", "memory_total_mib", "memory_used_mib"):
            if g[k] is None:
                g[k] = x[k]
        g["arch_hint"] = x["arch_hint"]
        if not g["sm"] and x["sm"]:
            g["sm"], g["sm_source"] = x["sm"], "compute_cap"
        if x["problem"]:
            g["problems"].append(x["problem"])
        if apps is None:
            g["processes"] = x["processes"]
    for t in (table or {}).get("gpus", []):
        g = slot(t["pci_bus_id"], t["index"])
        if g["index"] is None:
            g["index"] = t["index"]
        take(g, t)
        if g["name"] is None and t["name"]:
            g["name"] = t["name"]
        for k in ("memory_total_mib", "memory_used_mib"):
            if g[k] is None:
                g[k] = t[k]
        if t["problem"]:
            g["problems"].append(t["problem"])
    for u in (table or {}).get("unreachable", []) + unreachable_gpus(query_text) + \
            unreachable_gpus(raw.get("nvidia-smi-q.xml")):
        g = slot(u["pci_bus_id"], u["index"])
        if g["index"] is None:
            g["index"] = u["index"]
        if u["problem"] not in g["problems"]:
            g["problems"].append(u["problem"])

    # Processes: compute-apps CSV (by uuid) > XML (per GPU) > table (by index).
    by_uuid = {}
    for p in apps or []:
        by_uuid.setdefault(p["gpu_uuid"], []).append({k: p[k] for k in ("pid", "name", "used_mib", "type")})
    table_procs = {}
    for p in (table or {}).get("processes", []):
        table_procs.setdefault(p["gpu_index"], []).append({k: p[k] for k in ("pid", "name", "used_mib", "type")})
    units = meta.get("process_units") if isinstance(meta.get("process_units"), dict) else {}
    for plist in list(by_uuid.values()) + list(table_procs.values()) + \
            [x["processes"] for x in (xml or {}).get("gpus", [])]:
        for p in plist:
            p["unit"] = units.get(str(p.get("pid")))
    known_uuids = {g["uuid"] for g in gpus.values() if g["uuid"]}
    unmatched = [p for p in apps or [] if p["gpu_uuid"] not in known_uuids]
    for g in gpus.values():
        if apps is not None:
            g["processes"] = by_uuid.get(g["uuid"], [])
            if not g["processes"] and unmatched:  # apps CSV names GPUs we do not know (MIG-..., a uuid
                g["processes"] = table_procs.get(g["index"], [])  # the other sources lack): the table's list
        elif g["processes"] is None:
            g["processes"] = table_procs.get(g["index"], []) if table else []
    if unmatched and not table_procs:
        problems_early = [f"{len(unmatched)} process(es) on GPU UUIDs no other source lists ("
                          + ", ".join(sorted({p['gpu_uuid'] for p in unmatched})) + "): not attributed to a GPU"]
    else:
        problems_early = []

    out_gpus = []
    for key in order:
        g = gpus[key]
        if not g["sm"]:
            sm = sm_from_name(g["name"])
            if sm:
                g["sm"], g["sm_source"] = sm, "name"
        g["arch"] = arch_of(g["sm"]) or arch_of(None, g["arch_hint"])
        hard = list(g["problems"])
        soft = list(g["warnings"])
        if g["sm"] is None and not hard:
            soft.append((f"unknown SM for GPU name {g['name']!r}" if g["name"] else
                         f"unknown SM and name ({g['null_reasons'].get('name') or 'no source names it'})")
                        + " (the CUDA wheels cannot be checked against it)")
        reasons = {k: v for k, v in g["null_reasons"].items() if g.get(k) is None}
        if g["sm"] is None and "sm" not in reasons:
            reasons["sm"] = ("no compute_cap in any source and the name is not in the SM table"
                             if g["name"] else "no source names this GPU")
        used_why = reasons.get("memory_used_mib")
        if g["memory_used_mib"] is None and used_why and not hard and \
                not re.search(r"not supported|n/a", used_why, re.IGNORECASE):
            soft.append(f"memory use unknown ({used_why}): whether the GPU is busy is judged by its processes only")
        slice_note = _memory_slice_note(g["name"], g["memory_total_mib"])
        if slice_note and not hard:
            soft.append(slice_note)
        if g["compute_mode"] in ("Exclusive_Process", "Exclusive_Thread", "Prohibited"):
            soft.append(f"compute mode {g['compute_mode']}: " + (
                "no process may create a CUDA context on it" if g["compute_mode"] == "Prohibited" else
                "one process at a time may hold a CUDA context on it"))
        if g["mig_mode"] == "enabled":
            sizes = [d["memory_total_mib"] for d in g["mig_devices"] if d.get("memory_total_mib")]
            soft.append(f"MIG mode enabled ({len(g['mig_devices'])} MIG device(s)"
                        + (f", largest {max(sizes)} MiB" if sizes else "")
                        + "): CUDA sees MIG slices, not the whole GPU")
        out_gpus.append({
            "index": g["index"], "name": g["name"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"],
            "sm": g["sm"], "arch": g["arch"], "memory_total_mib": g["memory_total_mib"],
            "memory_used_mib": g["memory_used_mib"],
            "processes": sorted(g["processes"] or [], key=lambda p: (p["pid"] is None, p["pid"] or 0)),
            "healthy": not hard, "problem": "; ".join(hard + soft) or None,
            "sm_source": g["sm_source"], "mig_mode": g["mig_mode"], "mig_devices": g["mig_devices"],
            "compute_mode": g["compute_mode"],
            "null_reasons": reasons, "_warnings": soft,
        })
    out_gpus.sort(key=lambda g: (g["index"] is None, g["index"] if g["index"] is not None else 0,
                                 g["pci_bus_id"] or ""))

    # --- Driver and its CUDA.
    driver = next((v for v in (
        next((q["driver_version"] for q in query or [] if q["driver_version"]), None),
        xml and xml.get("driver_version"), table and table["driver_version"], proc_driver) if v), None)
    if driver and proc_driver and vtuple(proc_driver) != vtuple(driver):
        problems.append(f"driver/library version mismatch: kernel module {proc_driver}, NVML {driver}")
    if proc_driver:
        sources.append("proc-driver-nvidia-version.txt")
    driver_cuda = (xml and xml.get("cuda_version")) or (table and table["cuda_version"])
    driver_cuda_source = "nvidia-smi" if driver_cuda else None
    if driver_cuda is None and driver:
        inferred = cuda_of_driver(driver)
        cuda_na = bool((table and table.get("cuda_na")) or (xml and xml.get("cuda_na")))
        if inferred:
            driver_cuda, driver_cuda_source = inferred, "driver branch"
        if inferred and not cuda_na:
            sources.append(f"driver_cuda_version inferred from driver branch {vtuple(driver)[0]}")
        elif inferred:
            problems.append(f"nvidia-smi prints CUDA Version: N/A (libcuda missing or not visible: torch "
                            f"cannot use the GPUs); CUDA {inferred} assumed from driver {driver}")

    if proc_driver and not (query or (xml and xml["gpus"]) or (table and table["gpus"])):
        smi_errors = [e + f"; kernel module {proc_driver}" if "mismatch" in e else e for e in smi_errors]
    problems.extend(smi_errors)
    if not any(k in raw for k in ("nvidia-smi.txt", "nvidia-smi-query.csv", "nvidia-smi-q.xml")) \
            and not smi_errors:
        problems.append("no nvidia-smi output (nvidia-smi not found or not captured)")
    if not out_gpus and not smi_errors and any(
            k in raw for k in ("nvidia-smi.txt", "nvidia-smi-query.csv", "nvidia-smi-q.xml")):
        problems.append("nvidia-smi listed no GPUs")
    null_reasons = {}
    if driver is None:
        null_reasons["driver_version"] = "; ".join(smi_errors) or (
            "no source printed a driver version (no nvidia-smi header line, no XML, no driver_version column, "
            "no /proc/driver/nvidia/version)")
    if driver_cuda is None:
        null_reasons["driver_cuda_version"] = null_reasons.get("driver_version") or \
            (f"{driver} is a Jetson L4T release (Jetson's kernel module reports it instead of a driver "
             f"version): its CUDA comes with the JetPack, not with a driver branch" if _is_l4t(driver) else
             f"driver {driver} is older than every CUDA release this tool knows")
    problems.extend(problems_early)
    for g in out_gpus:
        label = g["index"] if g["index"] is not None else g["pci_bus_id"] or "?"
        if not g["healthy"]:
            problems.append(f"GPU {label}: {g['problem']}")
        else:
            problems.extend(f"GPU {label}: {w}" for w in g["_warnings"])
    for g in out_gpus:  # the warnings are in `problem` and the host's problems; not a fact key of their own
        del g["_warnings"]

    # --- Toolkits, nvcc, torch, OS.
    nvcc_version = parse_nvcc(raw.get("nvcc-version.txt"))
    if nvcc_version:
        sources.append("nvcc-version.txt")
    toolkits = []
    if raw.get("cuda-toolkits.json"):
        try:
            for t in json.loads(raw["cuda-toolkits.json"]):
                toolkits.append({"path": t.get("path"), "version": t.get("version")})
            sources.append("cuda-toolkits.json")
        except (ValueError, AttributeError, TypeError):
            problems.append("unreadable cuda-toolkits.json")
    if not toolkits and nvcc_version:  # a capture without cuda-toolkits.json: at least nvcc on PATH
        toolkits.append({"path": None, "version": nvcc_version})
    torch = parse_torch(raw.get("torch.json")) if "torch.json" in raw else None
    if torch is not None:
        sources.append("torch.json")
        if torch.get("error"):
            problems.append(f"torch probe failed: {torch['error']}")
        problems.extend(torch_problems(torch, out_gpus, driver_cuda))
    os_name = parse_os_release(raw.get("os-release"))
    if os_name:
        sources.append("os-release")
    glibc = parse_glibc(raw.get("glibc-version.txt"))
    if glibc:
        sources.append("glibc-version.txt")

    return {
        "gpu_count": len(out_gpus),
        "gpus": out_gpus,
        "driver_version": driver,
        "driver_cuda_version": driver_cuda,
        "driver_cuda_source": driver_cuda_source,
        "cuda_toolkits": toolkits,
        "nvcc_version": nvcc_version,
        "torch": torch,
        "os": os_name,
        "glibc": glibc,
        "sources": sources,
        "null_reasons": null_reasons,
        "problems": problems,
        "topology": parse_topology(raw.get("nvidia-smi-topo.txt"), raw.get("nvidia-smi-topo-p2p.txt")),
    }
