"""The parsers: nvidia-smi query CSV, compute-apps CSV, ``-q -x`` XML, the table; /proc, nvcc, os-release, glibc, torch."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from ansible.module_utils.dflash_fingerprint.smi_errors import smi_error, unreachable_gpus
from ansible.module_utils.dflash_fingerprint.values import (
    _BAD_VALUE,
    _clean,
    _int,
    _range_text,
    norm_bus_id,
    placeholder,
    vtuple,
)

_QUERY_KEYS = {"index": "index", "name": "name", "gpu_name": "name", "uuid": "uuid", "gpu_uuid": "uuid",
               "pci.bus_id": "bus", "gpu_bus_id": "bus", "compute_cap": "cc", "driver_version": "driver",
               "memory.total": "total", "memory.used": "used", "compute_mode": "compute_mode"}


def parse_query_csv(text) -> list[dict]:
    """--query-gpu CSV: our 8 fields (7 without compute_cap for drivers < 510), or any field order
    when the capture kept nvidia-smi's header line."""
    gpus = []
    columns = None
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if columns is None and not re.match(r"^\d+$", cells[0] or "") and \
                any(re.sub(r"\s*\[.*\]$", "", c) in _QUERY_KEYS for c in cells):
            columns = [_QUERY_KEYS.get(re.sub(r"\s*\[.*\]$", "", c)) for c in cells]
            continue
        if columns and len(cells) >= len(columns):
            extra = len(cells) - len(columns)  # a name with commas
            if extra and "name" in columns:
                at = columns.index("name")
                cells = cells[:at] + [", ".join(cells[at:at + extra + 1])] + cells[at + extra + 1:]
            row = dict(zip(columns, cells))
        elif re.match(r"^\d+$", cells[0] or "") and len(cells) >= 8:
            extra = len(cells) - 8
            row = dict(zip(("index", "name", "uuid", "bus", "cc", "driver", "total", "used"),
                           [cells[0], ", ".join(cells[1:2 + extra])] + cells[2 + extra:]))
            if extra and not (re.match(r"^(GPU|MIG)-", row["uuid"]) and norm_bus_id(row["bus"])):
                # the extra comma is not in the name (a comma decimal? a new field?): keep the index and
                # the first name cell, and read nothing else rather than shifted values
                row = dict({k: f"[unparsable row: {len(cells)} cells for 8 fields]"
                            for k in ("uuid", "bus", "cc", "driver", "total", "used")},
                           index=cells[0], name=cells[1])
        elif re.match(r"^\d+$", cells[0] or "") and len(cells) == 7:
            row = dict(zip(("index", "name", "uuid", "bus", "driver", "total", "used"), cells))
        else:
            continue
        index = row.get("index")
        if index is None or not re.match(r"^\d+$", index):
            index = str(len(gpus)) if "index" not in row else None
        if index is None:
            continue
        gpus.append(_query_row(int(index), row))
    return gpus


_VALID = {"sm": r"^\d+\.\d+$", "driver_version": r"^\d+\.\d+(\.\d+)*$", "memory_total_mib": r"^\d+(\s*MiB)?$",
          "memory_used_mib": r"^\d+(\s*MiB)?$"}


def _query_row(index: int, row: dict) -> dict:
    """One --query-gpu row -> GPU dict; a cell that is a placeholder or does not parse becomes null,
    its reason in ``null_reasons`` (hard placeholders also in ``problem``)."""
    out = {"index": index, "null_reasons": {}}
    hard = []
    for key, field in (("name", "name"), ("uuid", "uuid"), ("bus", "pci_bus_id"), ("cc", "sm"),
                       ("driver", "driver_version"), ("total", "memory_total_mib"), ("used", "memory_used_mib")):
        if key not in row:
            out[field] = None
            out["null_reasons"][field] = "not among the fields of this --query-gpu output"
            continue
        value, why, severity = placeholder(row[key])
        if value is not None and field in _VALID and not re.match(_VALID[field], value):
            value, why, severity = None, f"unparsable {value!r}", "soft"
        if value is not None and field == "pci_bus_id":
            value = norm_bus_id(value)
            if value is None:
                why, severity = f"unparsable {row[key]!r}", "soft"
        if value is not None and field.endswith("_mib"):
            value = _int(value)
        out[field] = value
        if why:
            out["null_reasons"][field] = why
            if severity == "hard":
                hard.append(f"{field}: {why}")
    out["problem"] = ("nvidia-smi reports " + ", ".join(hard)) if hard else None
    out["compute_mode"] = _COMPUTE_MODES.get(str(row.get("compute_mode") or "").strip())
    return out


def parse_apps_csv(text) -> list[dict]:
    """--query-compute-apps CSV -> [{gpu_uuid, pid, name, used_mib}]."""
    procs = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 4 or not cells[0].upper().startswith(("GPU-", "MIG-")):
            continue
        used = cells[-1]
        name = ", ".join(cells[2:-1])
        procs.append({"gpu_uuid": cells[0], "pid": _int(cells[1]), "name": _clean(name),
                      "used_mib": _int(used), "type": "C"})
    return procs


def parse_smi_xml(text) -> dict:
    """nvidia-smi -q -x -> {driver_version, cuda_version, gpus: [...]} (or {error})."""
    if not text or "<nvidia_smi_log" not in text:
        return {"error": smi_error(text) or "no XML output", "gpus": []}
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text)
    try:
        root = ET.fromstring(body.strip())
    except ET.ParseError as exc:
        return {"error": f"unparsable nvidia-smi -q -x output: {exc}", "gpus": []}

    def txt(node, path):
        el = node.find(path)
        return el.text.strip() if el is not None and el.text else None

    cuda = txt(root, "cuda_version")
    out = {"driver_version": _clean(txt(root, "driver_version")), "cuda_version": _clean(cuda),
           "cuda_na": cuda is not None and (_clean(cuda) is None or not re.match(r"^\d", cuda)), "gpus": []}
    if out["cuda_na"]:
        out["cuda_version"] = None
    for pos, g in enumerate(root.findall("gpu")):
        bus = norm_bus_id(g.get("id")) or norm_bus_id(txt(g, "pci/pci_bus_id"))
        values = [el.text.strip() for el in g.iter() if el.text and el.text.strip()]
        bad = sorted({v for v in values if v in ("ERR!", "Unknown Error", "GPU is lost")})
        problem = None
        if bad:
            problem = "nvidia-smi reports " + ", ".join(bad)
        flags = []
        action = _clean(txt(g, "gpu_recovery_action"))  # 575+: None, Reset, Reboot, Drain P2P, Drain and Reset
        if action and action.lower() != "none":
            flags.append(f"GPU recovery action: {action}")
        if (txt(g, "gpu_reset_status/reset_required") or "").lower() == "yes":
            flags.append("GPU requires reset")
        if (txt(g, "retired_pages/pending_retirement") or "").lower() == "yes":
            flags.append("retired pages pending (reset needed)")
        if "yes" in ((txt(g, "remapped_rows/remapped_row_pending") or "").lower(),
                     (txt(g, "remapped_rows/pending") or "").lower()):
            flags.append("row remapping pending (reset needed)")
        if "yes" in ((txt(g, "remapped_rows/remapped_row_failure") or "").lower(),
                     (txt(g, "remapped_rows/remapping_failure_occurred") or "").lower()):
            flags.append("row remapping failure")
        if flags:
            problem = "; ".join(([problem] if problem else []) + flags)
        procs = []
        for p in g.findall("processes/process_info"):
            procs.append({"pid": _int(txt(p, "pid")), "name": _clean(txt(p, "process_name")),
                          "used_mib": _int(txt(p, "used_memory")), "type": _clean(txt(p, "type"))})
        minor = _int(txt(g, "minor_number"))
        null_reasons = {}
        mem = {}
        for field, path in (("memory_total_mib", "fb_memory_usage/total"), ("memory_used_mib", "fb_memory_usage/used")):
            value, why, _sev = placeholder(txt(g, path))
            mem[field] = _int(value) if value is not None else None
            if value is not None and mem[field] is None:
                why = f"unparsable {value!r}"
            if why:
                null_reasons[field] = why
        mig_devices = []
        for d in g.findall("mig_devices/mig_device"):
            mig_devices.append({"gpu_instance": _int(txt(d, "gpu_instance_id")),
                                "compute_instance": _int(txt(d, "compute_instance_id")),
                                "memory_used_mib": _int(txt(d, "fb_memory_usage/used")),
                                "memory_total_mib": _int(txt(d, "fb_memory_usage/total"))})
        out["gpus"].append({
            "mig_mode": _mig_mode(txt(g, "mig_mode/current_mig")), "mig_devices": mig_devices,
            "compute_mode": _COMPUTE_MODES.get(_clean(txt(g, "compute_mode")) or ""),
            "null_reasons": null_reasons,
            "position": pos, "minor_number": minor, "name": _clean(txt(g, "product_name")),
            "arch_hint": _clean(txt(g, "product_architecture")), "uuid": _clean(txt(g, "uuid")),
            "sm": _clean(txt(g, "compute_cap")) if re.match(r"^\d+\.\d+$", txt(g, "compute_cap") or "") else None,
            "pci_bus_id": bus, "memory_total_mib": mem["memory_total_mib"],
            "memory_used_mib": mem["memory_used_mib"], "processes": procs,
            "problem": problem,
        })
    return out


def _mig_mode(text) -> str | None:
    """'Enabled' / 'Disabled' (table's MIG M. row, XML current_mig) -> 'enabled' / 'disabled'; N/A -> None."""
    text = (text or "").strip().lower()
    return text if text in ("enabled", "disabled") else None


_CUT_ROW = "not in the output (it ends inside this GPU's rows)"


# Compute mode as the table (abbreviated) and the XML / --query-gpu (full) print it.
_COMPUTE_MODES = {"Default": "Default", "E. Process": "Exclusive_Process", "E. Thread": "Exclusive_Thread",
                  "Prohibited": "Prohibited", "Exclusive_Process": "Exclusive_Process",
                  "Exclusive_Thread": "Exclusive_Thread"}


_MIG_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s*\|\s*(?:(\d+)\s*MiB\s*/\s*(\d+)\s*MiB)?")


_ROW1 = re.compile(
    r"^\|\s*(\d+)\s+(.*?)\s+(On|Off|N/A|ERR!|WDDM|TCC)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d|N/A)"
    r"\s+(\S+)\s*\|\s*(.*?)\s*\|\s*$")


_MEM = re.compile(r"\|\s*(\d+|ERR!)\s*MiB\s*/\s*(\d+|ERR!)\s*MiB\s*\||\|\s*(ERR!|N/A)\s*/\s*(\d+)MiB\s*\|")


_PROC = re.compile(
    r"^\|\s+(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+(\d+MiB|N/A)\s*\|\s*$")


def parse_smi_table(text) -> dict:
    """Plain `nvidia-smi` (old 79-column and new 89-column layouts)."""
    out = {"driver_version": None, "cuda_version": None, "gpus": [], "processes": [],
           "error": smi_error(text), "unreachable": unreachable_gpus(text)}
    if not text:
        return out
    m = re.search(r"(?:Driver|KMD) Version:\s*([0-9.]+)", text)
    out["driver_version"] = m.group(1) if m else None
    m = re.search(r"CUDA (?:UMD )?Version:\s*([0-9.]+|N/A)", text)
    out["cuda_version"] = _clean(m.group(1)) if m else None
    out["cuda_na"] = bool(m) and out["cuda_version"] is None
    lines = text.splitlines()
    in_procs = in_mig = False
    current = None
    mig_rows: dict = {}
    for line in lines:
        if re.match(r"^\|\s*Processes:", line):
            in_procs = True
            continue
        if re.match(r"^\|\s*MIG devices:", line):
            in_mig = True
            continue
        if in_mig and not in_procs:
            mg = _MIG_ROW.match(line)
            if mg:
                gpu, gi, ci, _dev, used, total = mg.groups()
                mig_rows.setdefault(int(gpu), []).append({
                    "gpu_instance": int(gi) if gi.isdigit() else None,
                    "compute_instance": int(ci) if ci.isdigit() else None,
                    "memory_used_mib": int(used) if used else None, "memory_total_mib": int(total) if total else None})
            continue
        if in_procs:
            pm = _PROC.match(line)
            if pm:
                gpu, _gi, _ci, pid, ptype, pname, mem = pm.groups()
                out["processes"].append({"gpu_index": int(gpu), "pid": int(pid), "type": ptype,
                                         "name": pname.strip() or None, "used_mib": _int(mem.replace("MiB", ""))})
            continue
        r1 = _ROW1.match(line)
        if r1:
            idx, name, _pm, bus, _disp, _ecc = r1.groups()
            current = {"index": int(idx), "name": name.strip(), "pci_bus_id": norm_bus_id(bus),
                       "memory_total_mib": None, "memory_used_mib": None, "mig_mode": None, "mig_devices": [],
                       "null_reasons": {}, "truncated_name": name.strip().endswith("..."), "bad": [], "row": 1,
                       "compute_mode": None}
            if _BAD_VALUE.search(line):
                current["bad"].append(line)
            out["gpus"].append(current)
            continue
        if current is not None and line.startswith("|") and current["row"] in (1, 2):
            current["row"] += 1
            if current["row"] == 2:  # fan, temp, perf, power | memory | util, compute mode
                cells = line.strip().strip("|").split("|")
                memcell = cells[1].strip() if len(cells) >= 3 else ""
                mm = re.search(r"(\d+|ERR!|N/A)\s*(?:MiB)?\s*/\s*(\d+|ERR!|N/A)\s*MiB", memcell)
                if mm:
                    current["memory_used_mib"] = _int(mm.group(1))
                    current["memory_total_mib"] = _int(mm.group(2))
                    for field, cell in (("memory_used_mib", mm.group(1)), ("memory_total_mib", mm.group(2))):
                        if not cell.isdigit():
                            current["null_reasons"][field] = cell
                elif memcell:  # "Not Supported" (unified memory), "N/A", "Unknown Error"
                    current["null_reasons"]["memory_used_mib"] = current["null_reasons"]["memory_total_mib"] = memcell
                else:  # the output ends inside this row (a partial paste, a killed command)
                    current["null_reasons"]["memory_used_mib"] = current["null_reasons"]["memory_total_mib"] = \
                        _CUT_ROW
                cm = re.search(r"(Default|E\. Process|E\. Thread|Prohibited)\s*$", cells[-1]) if len(cells) >= 3 \
                    else None
                current["compute_mode"] = _COMPUTE_MODES.get(cm.group(1)) if cm else None
            else:  # the third row: ... | MIG M.
                cells = line.strip().strip("|").split("|")
                current["mig_mode"] = _mig_mode(cells[-1]) if len(cells) >= 3 else None
            if _BAD_VALUE.search(line):
                current["bad"].append(line)
            continue
        if current is not None and line.startswith("|") and _BAD_VALUE.search(line):
            current["bad"].append(line)
    for g in out["gpus"]:
        if g.pop("row", None) == 1:  # the output ends after the GPU's first row
            g["null_reasons"]["memory_used_mib"] = g["null_reasons"]["memory_total_mib"] = _CUT_ROW
        g["mig_devices"] = mig_rows.get(g["index"], [])
        if g["mig_devices"] and g["mig_mode"] is None:
            g["mig_mode"] = "enabled"
        bad = g.pop("bad")
        reasons = sorted({m.group(0) for b in bad for m in _BAD_VALUE.finditer(b)})
        if "ERR!" in g["name"] or g["name"] in ("", "Unknown"):
            g["name"] = None
        g["problem"] = ("nvidia-smi reports " + ", ".join(reasons)) if reasons else None
    return out


def parse_proc_version(text) -> str | None:
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text or "")
    return m.group(1) if m else None


def parse_nvcc(text) -> str | None:
    m = re.search(r"release\s+(\d+\.\d+)", text or "")
    return m.group(1) if m else None


def parse_os_release(text) -> str | None:
    fields = {}
    for line in (text or "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            fields[k.strip()] = v.strip().strip('"')
    return fields.get("PRETTY_NAME") or (" ".join(filter(None, [fields.get("NAME"), fields.get("VERSION_ID")]))
                                         or None)


def parse_glibc(text) -> str | None:
    m = re.search(r"(\d+\.\d+)", text or "")
    return m.group(1) if m else None


def parse_torch(text) -> dict | None:
    if not text or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return {"version": None, "cuda": None, "available": False, "error": text.strip()[-300:]}
    if not isinstance(data, dict):
        return {"version": None, "cuda": None, "available": False, "error": f"unexpected torch probe output: "
                f"{text.strip()[-200:]}"}
    out = dict(data)
    for key in ("version", "cuda", "hip"):
        if key in out:
            out[key] = str(out[key]) if out[key] is not None else None
    out["available"] = out.get("available") is True
    if "arch_list" in out:
        out["arch_list"] = [str(a) for a in out["arch_list"]] if isinstance(out["arch_list"], list) else []
    return out


def torch_covers_sm(arch_list, sm) -> bool | None:
    """Whether a torch build's arch list runs on SM ``sm``: SASS of the same major and a minor <= ours
    (sm_80 runs on 8.6), or PTX (compute_XY) of an SM <= ours that the driver can JIT. None when unknown."""
    t = vtuple(sm)
    archs = [a for a in arch_list or [] if re.match(r"^(sm|compute)_\d+[a-z]?$", a)]
    if len(t) < 2 or not archs:
        return None
    for a in archs:
        kind, num = a.split("_")
        num = re.sub(r"[a-z]$", "", num)
        major, minor = int(num[:-1]), int(num[-1])
        if kind == "sm" and major == t[0] and minor <= t[1]:
            return True
        if kind == "compute" and (major, minor) <= (t[0], t[1]) and not a.endswith("a"):
            return True
    return False


def torch_problems(torch: dict, gpus: list, driver_cuda) -> list[str]:
    """What the probed torch means for this host: a ROCm or CPU-only build, no kernels for a GPU's SM,
    built for a newer CUDA than the driver's."""
    out = []
    version, cuda = torch.get("version"), torch.get("cuda")
    if version is None and not (cuda or torch.get("arch_list")):
        return out  # the probe failed: its error is the problem
    version = version or "(version unknown)"
    if torch.get("hip") or "+rocm" in version:
        return [f"torch {version} is a ROCm (AMD) build: it cannot use NVIDIA GPUs"]
    if cuda is None:
        return [f"torch {version} is a CPU-only build (torch.version.cuda is None): no GPU use"]
    for sm in sorted({g["sm"] for g in gpus if g.get("sm")}, key=vtuple):
        if torch_covers_sm(torch.get("arch_list"), sm) is False:
            idx = _range_text([g["index"] for g in gpus if g.get("sm") == sm])
            out.append(f"torch {version} (CUDA {cuda}) has no kernels for SM {sm} (GPU {idx}): its arch list is "
                       + " ".join(torch.get("arch_list") or []))
    if driver_cuda and vtuple(cuda)[:2] > vtuple(driver_cuda)[:2]:
        out.append(f"torch {version} is built for CUDA {cuda}, newer than the driver's CUDA {driver_cuda}")
    return out
