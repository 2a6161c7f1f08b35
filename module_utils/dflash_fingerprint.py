#!/usr/bin/env python3
"""GPU host fingerprint: collect, capture, replay and parse; compatibility gate.

Pure functions, no Ansible import. Used by library/gpu_fingerprint.py (as
``ansible.module_utils.dflash_fingerprint``), by the unit tests (``import dflash_fingerprint``),
and as a plain CLI on machines without Ansible:

    python3 module_utils/dflash_fingerprint.py --capture-dir DIR [--venv-python PY]
    python3 module_utils/dflash_fingerprint.py --replay-dir DIR

A host's raw outputs are a dict ``{file name: text}`` in the capture-folder format
(docs/design.md, issue 3): nvidia-smi.txt, nvidia-smi-query.csv, nvidia-smi-apps.csv,
nvidia-smi-q.xml, proc-driver-nvidia-version.txt, nvcc-version.txt, torch.json, os-release,
plus glibc-version.txt, cuda-toolkits.json and capture-meta.json (commands, exit codes, errors).
``fingerprint_from_raw`` turns any subset of them into the ``dflash_fingerprint`` fact, taking
each field from the richest source that has it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

try:  # the unit of a process (cgroup, or runner-managed on hosts without systemd): dflash_runner.py
    from ansible.module_utils.dflash_runner import process_unit
except ImportError:
    from dflash_runner import process_unit
try:  # nvidia-smi topo -m / -p2p r (dflash_topo.py)
    from ansible.module_utils.dflash_topo import TOPO_FILES, collect_topology, parse_topology
except ImportError:
    from dflash_topo import TOPO_FILES, collect_topology, parse_topology


# ----------------------------------------------------------------------------------------------
# Reference tables
# ----------------------------------------------------------------------------------------------

QUERY_FIELDS = "index,name,uuid,pci.bus_id,compute_cap,driver_version,memory.total,memory.used"
QUERY_FIELDS_OLD = "index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used"
APPS_FIELDS = "gpu_uuid,pid,process_name,used_memory"

FILES = (
    "nvidia-smi.txt", "nvidia-smi-query.csv", "nvidia-smi-apps.csv", "nvidia-smi-q.xml",
    "proc-driver-nvidia-version.txt", "nvcc-version.txt", "torch.json", "os-release",
    "glibc-version.txt", "cuda-toolkits.json", "capture-meta.json",
) + tuple(TOPO_FILES)

# NVIDIA, "CUDA Toolkit and Corresponding Driver Versions" (CUDA Toolkit release notes, Table 3,
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html): minimum Linux x86_64
# driver of each CUDA minor release (GA).
MIN_DRIVER = {
    "13.2": "595.45.04", "13.1": "590.44.01", "13.0": "580.65.06",
    "12.9": "575.51.03", "12.8": "570.26", "12.6": "560.28.03", "12.5": "555.42.02",
    "12.4": "550.54.14", "12.3": "545.23.06", "12.2": "535.54.03", "12.1": "530.30.02",
    "12.0": "525.60.13", "11.8": "520.61.05", "11.7": "515.43.04", "11.6": "510.39.01",
    "11.5": "495.29.05", "11.4": "470.42.01", "11.3": "465.19.01", "11.2": "460.27.03",
    "11.1": "455.23", "11.0": "450.36.06", "10.2": "440.33", "10.1": "418.39", "10.0": "410.48",
    "9.2": "396.26", "9.1": "390.46", "9.0": "384.81", "8.0": "375.26",
}
# Minor version compatibility (NVIDIA CUDA Compatibility guide): a binary built with any 12.x
# runs on a driver >= the 12.0 GA floor, 13.x on >= 580, 11.x on >= 450.80.02 (with limits:
# no PTX JIT of newer PTX). Only used when the gate is told to allow it.
MINOR_COMPAT_DRIVER = {"11": "450.80.02", "12": "525.60.13", "13": "580.65.06"}

# Lowest CUDA release that can build for / run on an SM (native SASS), and the highest CUDA
# major that still supports it (CUDA 13.0 dropped Maxwell, Pascal and Volta).
SM_MIN_CUDA = {
    "3.5": "5.0", "3.7": "6.5", "5.0": "6.0", "5.2": "6.5", "5.3": "6.5", "6.0": "8.0",
    "6.1": "8.0", "6.2": "8.0", "7.0": "9.0", "7.2": "9.2", "7.5": "10.0", "8.0": "11.0",
    "8.6": "11.1", "8.7": "11.4", "8.9": "11.8", "9.0": "11.8", "10.0": "12.8", "10.1": "12.8",
    "10.3": "12.9", "11.0": "13.0", "12.0": "12.8", "12.1": "12.9",
}
SM_MAX_CUDA_MAJOR = {"3": 11, "5": 12, "6": 12, "7.0": 12, "7.2": 12}

ARCH_BY_SM = {
    "3": "kepler", "5": "maxwell", "6": "pascal", "7.0": "volta", "7.2": "volta", "7.5": "turing",
    "8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada", "9": "hopper",
    "10": "blackwell", "11": "blackwell", "12": "blackwell",
}
ARCH_NAMES = {  # nvidia-smi -q product_architecture -> family
    "kepler": "kepler", "maxwell": "maxwell", "pascal": "pascal", "volta": "volta",
    "turing": "turing", "ampere": "ampere", "ada lovelace": "ada", "ada": "ada",
    "hopper": "hopper", "blackwell": "blackwell",
}

# GPU name -> SM, for drivers too old for the compute_cap query (< 510) and for sources that
# have no SM (the -q XML, the plain table). Patterns also match the plain table's truncated
# names ("NVIDIA RTX PRO 6000 Blac...", "Tesla V100-SXM2...", "NVIDIA GeForce RTX 5090 ...").
# First match wins; the more specific patterns come first.
NAME_SM = [
    (r"Quadro RTX|TITAN RTX", "7.5"),  # before the GeForce number patterns ("Quadro RTX 5000" is Turing)
    (r"RTX \d+ (?:SFF )?Ada", "8.9"),  # before "RTX 50x0" ("RTX 5000 Ada Generation" is Ada)
    (r"\bGB10\b", "12.1"),
    (r"RTX PRO \d+", "12.0"),
    (r"RTX 50\d0", "12.0"),
    (r"\bG?B300\b", "10.3"),
    (r"\bG?B[12]00\b", "10.0"),
    (r"\bThor\b", "11.0"),
    (r"\bG?H(100|200|800|20)\b|\bH20[ -]|\bGH200\b", "9.0"),
    (r"RTX \d+ Ada|RTX \d+ SFF Ada|\bL40S?\b|\bL4\b|\bL20\b|\bL2\b|RTX 40\d0|RTX 2000E? Ada", "8.9"),
    (r"\bA100\b|\bA800\b|\bA30\b|A100-|A800-|\bA100X\b", "8.0"),
    (r"\bOrin\b", "8.7"),
    (r"RTX A\d+|\bA40\b|\bA10G?\b|\bA16\b|\bA2\b|\bA10M\b|RTX 30\d0|\bA6000\b", "8.6"),
    (r"Quadro RTX|TITAN RTX|RTX 20\d0|GTX 16\d0|\bT4\b|\bT4G\b|\bT1000\b|\bT400\b|\bT600\b|\bT[1-2]200\b", "7.5"),
    (r"V100|TITAN V\b|Quadro GV100", "7.0"),
    (r"P100", "6.0"),
    (r"\bP40\b|\bP4\b|\bP6\b|GTX 10\d0|TITAN Xp|TITAN X \(Pascal\)|Quadro P\d+", "6.1"),
    (r"\bM60\b|\bM40\b|GTX 9\d0|TITAN X\b|Quadro M\d+", "5.2"),
    (r"\bK80\b", "3.7"),
    (r"\bK40\b|\bK20X?\b", "3.5"),
]

# Driver branch -> highest CUDA it supports (used when nvidia-smi prints "CUDA Version: N/A").
BRANCH_CUDA = [
    (595, "13.2"), (590, "13.1"), (580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"),
    (555, "12.5"), (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"),
    (520, "11.8"), (515, "11.7"), (510, "11.6"), (495, "11.5"), (470, "11.4"), (465, "11.3"),
    (460, "11.2"), (455, "11.1"), (450, "11.0"), (440, "10.2"), (418, "10.1"), (410, "10.0"),
    # drivers before 410 print no "CUDA Version" in the table header at all: the branch is all there is
    (396, "9.2"), (390, "9.1"), (384, "9.0"), (375, "8.0"), (367, "8.0"),
]

BUSY_THRESHOLD_MIB = 1024
# Memory that means another CUDA context exists (a bare context takes ~300-500 MiB): on an exclusive-process
# GPU that context blocks ours.
EXCLUSIVE_CONTEXT_MIB = 256
# Where nvidia-smi lives when it is not on PATH (containers put it in /usr/local/nvidia/bin).
SMI_FALLBACKS = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/bin/nvidia-smi",
                 "/usr/lib/wsl/lib/nvidia-smi")

# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------

_BAD_VALUE = re.compile(r"ERR!|Unknown Error|GPU is lost|requires reset|\[Unknown|Not Found", re.IGNORECASE)
_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "err!", "none"}


# Placeholders nvidia-smi prints instead of a value. "Not applicable" ones (N/A, Not Supported: a GB10's
# unified memory, a MIG GPU's utilization) are simply null; the others are null *with a reason*:
# hard ones mean the GPU is broken, soft ones mean we could not look (permissions, odd text).
_HARD_PLACEHOLDER = re.compile(r"ERR!|Unknown Error|GPU is lost|requires reset|Not Found", re.IGNORECASE)


def placeholder(value) -> tuple:
    """-> (clean value or None, reason or None, severity None|'na'|'soft'|'hard') for one cell."""
    if value is None:
        return None, None, None
    text = str(value).strip()
    if text.lower() in _NA - {"err!", "[unknown error]"}:
        return None, text or "empty", "na"
    if _HARD_PLACEHOLDER.search(text):
        return None, text.strip("[]"), "hard"
    if text.startswith("[") and text.endswith("]"):
        return None, text.strip("[]"), "soft"
    return text, None, None


def vtuple(version) -> tuple:
    """'580.95.05' -> (580, 95, 5); '12.8' -> (12, 8); None/garbage -> ()."""
    if version is None:
        return ()
    return tuple(int(p) for p in re.findall(r"\d+", str(version))[:4])


def version_ge(a, b) -> bool:
    ta, tb = vtuple(a), vtuple(b)
    n = max(len(ta), len(tb))
    return ta + (0,) * (n - len(ta)) >= tb + (0,) * (n - len(tb))


def _clean(value):
    if value is None:
        return None
    value = str(value).strip()
    return None if value.lower() in _NA else value


def _int(value):
    value = _clean(value)
    if value is None:
        return None
    m = re.match(r"^\s*(\d+)\s*(MiB)?\s*$", value)
    return int(m.group(1)) if m else None


def norm_bus_id(bus) -> str | None:
    """'0000:3B:00.0' / '00000000:3b:00.0' / '3B:00.0' -> '00000000:3B:00.0'."""
    bus = _clean(bus)
    if not bus:
        return None
    m = re.search(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])", bus)
    if not m:
        return None
    dom, b, d, f = m.groups()
    return f"{int(dom or '0', 16):08X}:{int(b, 16):02X}:{int(d, 16):02X}.{f}"


def sm_from_name(name) -> str | None:
    """SM of a GPU name; vGPU profile names ("NVIDIA H100L-2-24C", "NVIDIA H100XM-80C", "GRID A100D-40C")
    are matched on their base model (the letters between the model number and the profile dropped)."""
    if not name or not isinstance(name, str):
        return None
    for candidate in (name, re.sub(r"\b([A-Z]{1,2}\d{2,4})[A-Z]{1,2}(?=-\d)", r"\1", name)):
        for pattern, sm in NAME_SM:
            if re.search(pattern, candidate, re.IGNORECASE):
                return sm
    return _sm_of_truncated(name)


def _sm_of_truncated(name) -> str | None:
    """The plain table cuts long names ("GeForce GTX 105...", "NVIDIA GeForce RTX 409..."): when the cut falls
    inside a model number, complete it with zeros (the model numbers of the SM table end in 0) and accept the
    SM only if every completion that names a model agrees."""
    m = re.match(r"^(.*?\D)(\d{2,3})\s*\.\.\.$", name.strip())  # at least 2 digits of the number before the cut
    if not m:
        return None
    found = set()
    for pad in ("0", "00")[:4 - len(m.group(2))]:
        for pattern, sm in NAME_SM:
            if re.search(pattern + r"(?!\d)", m.group(1) + m.group(2) + pad, re.IGNORECASE):
                found.add(sm)
                break
    return found.pop() if len(found) == 1 else None


def arch_of(sm, hint=None) -> str | None:
    if sm:
        major = sm.split(".")[0]
        return ARCH_BY_SM.get(sm) or ARCH_BY_SM.get(major)
    if hint:
        return ARCH_NAMES.get(str(hint).strip().lower())
    return None


def _is_l4t(version) -> bool:
    """Jetson's /proc/driver/nvidia/version prints the L4T release (35.3.1, 36.4.0), not a driver version: no
    NVIDIA driver of the CUDA era has a major below 100."""
    t = vtuple(version)
    return bool(t) and t[0] < 100


def cuda_of_driver(driver_version) -> str | None:
    t = vtuple(driver_version)
    if not t:
        return None
    for branch, cuda in BRANCH_CUDA:
        if t[0] >= branch:
            return cuda
    return None


def _memory_slice_note(name, total_mib) -> str | None:
    """A GPU whose memory.total is far below the size its name states ("Tesla V100-PCIE-16GB" showing 3000 MiB)
    is seen through a slice or a limit (HAMi, a vGPU profile): say so, the server gets only that much. Grace
    superchip names (GH200 480GB) count the CPU's memory and are left out."""
    m = re.search(r"(\d{1,3})\s*GB\b", name or "", re.IGNORECASE)
    if not m or not isinstance(total_mib, int) or re.search(r"\bG[HB]\d{2,3}\b", name):
        return None
    stated = int(m.group(1)) * 1024
    if total_mib >= 0.75 * stated:
        return None
    return (f"memory.total {total_mib} MiB is far below the {m.group(1)} GB its name states: the GPU is seen "
            f"through a slice or a limit (HAMi, vGPU); a server on it gets {total_mib} MiB")


def _range_text(indexes) -> str:
    idx = sorted(i for i in indexes if i is not None)
    if not idx:
        return "none"
    out, start, prev = [], idx[0], idx[0]
    for i in idx[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(out)


# ----------------------------------------------------------------------------------------------
# Error texts printed by nvidia-smi instead of data
# ----------------------------------------------------------------------------------------------

_ERROR_PATTERNS = [
    (r"Driver/library version mismatch", ("driver/library version mismatch (NVML and kernel module differ; "
                                          "reboot or reload the nvidia module)")),
    (r"couldn't communicate with the NVIDIA driver", ("nvidia-smi cannot communicate with the NVIDIA driver "
                                                      "(driver not loaded or not installed)")),
    (r"No devices were found", "no NVIDIA devices were found"),
    (r"Failed to initialize NVML: (.+)", "failed to initialize NVML: {0}"),
    (r"NVML Shared Library Not Found", "NVML library not found (driver user-space not installed)"),
    (r"(?:nvidia-smi|command)[^\n]*not found|No such file or directory", "nvidia-smi not found"),
    (r"Insufficient Permissions", "insufficient permissions to query the GPUs"),
    (r'Field "([^"]+)" is not a valid field to query',
     ("this nvidia-smi does not know the query field {0} (driver older than the field: compute_cap needs "
      "driver >= 510); the capture retries without it, this one did not")),
]


def smi_error(text) -> str | None:
    """The reason nvidia-smi printed instead of data, or None when the text holds data."""
    if not text:
        return None
    head = "\n".join(line for line in text.splitlines()[:12])
    if re.search(r"NVIDIA-SMI \d|<nvidia_smi_log>|^\s*\d+\s*,|^[^,\n]+(?:,[^,\n]*){2,}$", head, re.MULTILINE):
        return None  # data: a table, XML or CSV rows (a CSV cell may say [Insufficient Permissions])
    for pattern, message in _ERROR_PATTERNS:
        m = re.search(pattern, head)
        if m:
            out = message.format(*(g.strip() for g in m.groups()))
            lib = re.search(r"NVML library version:\s*([0-9.]+)", head)
            return out + (f"; NVML library {lib.group(1)}" if lib else "")
    return None


_UNREACHABLE = re.compile(
    r"Unable to determine the device handle for[ \t]*(?:GPU)?[ \t]*"
    r"(?:(\d{1,3})(?:[ \t]*:(?![0-9A-Fa-f]{2}[:.])|[ \t]*$)[ \t]*)?"
    r"(?:((?:[0-9A-Fa-f]{1,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])[ \t]*:?)?[ \t]*([^\n]*)",
    re.IGNORECASE | re.MULTILINE)


def unreachable_gpus(text) -> list[dict]:
    """'Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error' (also the older
    'for GPU0000:3B:00.0: Unknown Error' and 'for GPU 0: Unknown Error') -> [{index, pci_bus_id, problem}]."""
    out = []
    for m in _UNREACHABLE.finditer(text or ""):
        index, bus, reason = m.groups()
        reason = reason.strip().lstrip(":").strip()
        out.append({"index": int(index) if index is not None else None, "pci_bus_id": norm_bus_id(bus),
                    "problem": "Unable to determine the device handle" + (f": {reason}" if reason else "")})
    return out


# ----------------------------------------------------------------------------------------------
# Parsers: one per source, each returns plain dicts
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Merge: raw outputs -> the dflash_fingerprint fact
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Collection (live) and capture/replay folders
# ----------------------------------------------------------------------------------------------

TORCH_PROBE = (
    "import json\n"
    "try:\n"
    "    import torch\n"
    "    d = {'version': torch.__version__, 'cuda': torch.version.cuda,\n"
    "         'hip': getattr(torch.version, 'hip', None)}\n"
    "    try:\n"
    "        import warnings\n"
    "        with warnings.catch_warnings(record=True) as w:\n"
    "            warnings.simplefilter('always')\n"
    "            d['available'] = bool(torch.cuda.is_available())\n"
    "        if w and not d['available']:\n"
    "            d['error'] = str(w[-1].message)[-300:]\n"
    "        d['device_count'] = torch.cuda.device_count() if d['available'] else 0\n"
    "        d['arch_list'] = torch.cuda.get_arch_list() if d['available'] else []\n"
    "    except Exception as e:\n"
    "        d['available'] = False\n"
    "        d['error'] = repr(e)[-300:]\n"
    "except Exception as e:\n"
    "    d = {'version': None, 'cuda': None, 'available': False, 'error': repr(e)[-300:]}\n"
    "print(json.dumps(d))\n"
)


def _run(argv, timeout=60, env=None):
    """-> (rc, combined output) ; rc None when the program does not exist."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           env=env, check=False)
    except FileNotFoundError:
        return None, f"{argv[0]}: command not found"
    except PermissionError as exc:
        return None, f"{argv[0]}: {exc}"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: timed out after {timeout}s"
    return p.returncode, p.stdout.decode("utf-8", "replace")


def find_toolkits(roots=("/usr/local",), nvcc_path=None) -> list[dict]:
    """Every CUDA toolkit under /usr/local/cuda* plus the one of nvcc on PATH."""
    seen, out = set(), []
    candidates = []
    for root in roots:
        candidates += sorted(glob.glob(os.path.join(root, "cuda*")))
    if nvcc_path:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc_path))))
    for c in candidates:
        real = os.path.realpath(c)
        if real in seen or not os.path.isdir(real):
            continue
        version = None
        vj = os.path.join(real, "version.json")
        vt = os.path.join(real, "version.txt")
        try:
            if os.path.isfile(vj):
                with open(vj, encoding="utf-8") as fh:
                    version = json.load(fh).get("cuda", {}).get("version")
            elif os.path.isfile(vt):
                with open(vt, encoding="utf-8") as fh:
                    version = (re.findall(r"(\d+\.\d+(?:\.\d+)?)", fh.read()) or [None])[0]
        except (OSError, ValueError, AttributeError):
            version = None
        nvcc = os.path.join(real, "bin", "nvcc")
        if version is None and os.access(nvcc, os.X_OK):
            rc, text = _run([nvcc, "--version"], timeout=30)
            version = parse_nvcc(text) if rc == 0 else None
        if version is None and not os.path.exists(nvcc):
            continue
        seen.add(real)
        short = ".".join(str(x) for x in vtuple(version)[:2]) if version else None
        out.append({"path": c if os.path.islink(c) is False else real, "version": short,
                    "full_version": version, "nvcc": nvcc if os.path.exists(nvcc) else None})
    return out


def collect_raw(venv_python=None, proc_version_path="/proc/driver/nvidia/version",
                nvidia_smi="nvidia-smi", toolkit_roots=("/usr/local",), timeout=60) -> dict:
    """Run the tools on this host and return its raw outputs in the capture-folder format."""
    raw: dict = {}
    meta = {"commands": {}, "exit_codes": {}, "errors": {}, "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())}

    def record(fname, argv):
        rc, text = _run(argv, timeout=timeout)
        meta["commands"][fname] = " ".join(argv)
        meta["exit_codes"][fname] = rc
        if rc is None:
            meta["errors"][fname] = text
            return None, text
        if rc != 0:
            meta["errors"][fname] = smi_error(text) or (
                f"exit code {rc}" if re.search(r"NVIDIA-SMI \d|<nvidia_smi_log|^\s*\d+\s*,", text, re.MULTILINE)
                else text.strip()[-300:])
        raw[fname] = text
        return rc, text

    smi = shutil.which(nvidia_smi) or (nvidia_smi if os.path.isabs(nvidia_smi) else None)
    if smi is None and nvidia_smi == "nvidia-smi":  # become/sudo's secure_path may miss these
        smi = next((c for c in SMI_FALLBACKS if os.access(c, os.X_OK)), None)
    if smi:
        rc, _ = record("nvidia-smi.txt", [smi])
    if smi and rc == 124:  # a hung driver (GSP timeouts, Xid 119/79): do not wait 4 times
        meta["errors"]["nvidia-smi.txt"] = (f"nvidia-smi timed out after {timeout}s (driver or GPU hung? "
                                            "look for NVRM Xid lines in dmesg)")
    elif smi:
        rc, text = record("nvidia-smi-query.csv", [smi, f"--query-gpu={QUERY_FIELDS}",
                                                   "--format=csv,noheader,nounits"])
        if rc not in (0, None) and "compute_cap" in (text or "") and "not a valid field" in (text or ""):
            record("nvidia-smi-query.csv", [smi, f"--query-gpu={QUERY_FIELDS_OLD}",
                                            "--format=csv,noheader,nounits"])
            if meta["exit_codes"]["nvidia-smi-query.csv"] == 0:
                meta["errors"].pop("nvidia-smi-query.csv", None)
        record("nvidia-smi-apps.csv", [smi, f"--query-compute-apps={APPS_FIELDS}", "--format=csv,noheader,nounits"])
        record("nvidia-smi-q.xml", [smi, "-q", "-x"])
        raw.update(collect_topology(smi, lambda argv: _run(argv, timeout=timeout)))
        pids = {p["pid"] for p in parse_apps_csv(raw.get("nvidia-smi-apps.csv"))}
        pids |= {p["pid"] for p in parse_smi_table(raw.get("nvidia-smi.txt"))["processes"]}
        units = {str(pid): process_unit(pid) for pid in sorted(p for p in pids if p)}
        meta["process_units"] = {pid: unit for pid, unit in units.items() if unit}
    else:
        meta["errors"]["nvidia-smi.txt"] = "nvidia-smi not found"
    try:
        with open(proc_version_path, encoding="utf-8", errors="replace") as fh:
            raw["proc-driver-nvidia-version.txt"] = fh.read()
    except OSError as exc:
        meta["errors"]["proc-driver-nvidia-version.txt"] = f"{proc_version_path}: {exc.strerror}"
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        nvcc = next((c for c in ["/usr/local/cuda/bin/nvcc"] + sorted(glob.glob("/usr/local/cuda-*/bin/nvcc"),
                                                                     key=vtuple, reverse=True) if os.access(c, os.X_OK)), None)
    if nvcc:
        record("nvcc-version.txt", [nvcc, "--version"])
    toolkits = find_toolkits(toolkit_roots, nvcc)
    raw["cuda-toolkits.json"] = json.dumps(toolkits, indent=2) + "\n"
    if venv_python:
        rc, text = _run([venv_python, "-c", TORCH_PROBE], timeout=max(timeout, 120))
        meta["commands"]["torch.json"] = f"{venv_python} -c <torch probe>"
        meta["exit_codes"]["torch.json"] = rc
        line = next((ln for ln in reversed((text or "").splitlines()) if ln.startswith("{")), None)
        raw["torch.json"] = (line + "\n") if (rc == 0 and line) else json.dumps(
            {"version": None, "cuda": None, "available": False,
             "error": f"{venv_python}: " + (text or "").strip()[-300:]}) + "\n"
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                raw["os-release"] = fh.read()
            break
    try:
        glibc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        glibc = None
    if glibc:
        raw["glibc-version.txt"] = glibc + "\n"
    raw["capture-meta.json"] = json.dumps(meta, indent=2, sort_keys=True) + "\n"
    return raw


def write_capture(raw: dict, directory) -> list[str]:
    """Write raw outputs into a capture folder; returns the file names written."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for name in FILES:
        if name in raw and raw[name] is not None:
            with open(os.path.join(directory, name), "w", encoding="utf-8") as fh:
                fh.write(raw[name])
            written.append(name)
    return written


def read_capture(directory) -> dict:
    """Read a capture folder (any subset of FILES)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"replay_dir {directory} is not a directory")
    raw = {}
    for name in FILES:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as fh:
                raw[name] = fh.read()
    if not raw:
        raise FileNotFoundError(f"replay_dir {directory} holds none of the capture files ({', '.join(FILES[:8])})")
    return raw


# ----------------------------------------------------------------------------------------------
# Gate: requested GPUs; driver CUDA vs the layers' CUDA
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Fleet report (controller side)
# ----------------------------------------------------------------------------------------------

def host_verdict(fp, refusals=None) -> str:
    """'ok', 'REFUSED: ...', the host's problems, or why there is no fingerprint."""
    if fp is None:
        return "no fingerprint (host unreachable or the module failed)"
    if refusals:
        return "REFUSED: " + " | ".join(refusals)
    if not fp.get("gpu_count"):
        return "no GPUs: " + ("; ".join(fp.get("problems") or []) or "none found")
    if fp.get("problems"):
        return "warning: " + "; ".join(fp["problems"])
    return "ok"


def fleet_rows(fleet: dict, refusals: dict | None = None) -> list[dict]:
    """{host: fingerprint or None} (+ {host: [refusal]}) -> one summary row per host."""
    rows = []
    for host in sorted(fleet):
        fp = fleet[host]
        verdict = host_verdict(fp, (refusals or {}).get(host))
        fp = fp or {}
        models = {}
        for g in fp.get("gpus", []):
            key = (g.get("name") or "unknown", g.get("sm"))
            models.setdefault(key, []).append(g)
        gpus_txt = "; ".join(f"{len(v)}x {n}" + (f" (SM {sm}, {v[0].get('arch')})" if sm else " (SM ?)")
                             for (n, sm), v in models.items()) or "none"
        mem_txt = "; ".join(f"{v[0].get('memory_total_mib')} MiB" if v[0].get("memory_total_mib") is not None
                            else "unified/unknown" for v in models.values()) or "-"
        busy = [g for g in fp.get("gpus", []) if g.get("index") is not None and gpu_busy_reason(g)]
        busy_txt = "; ".join(f"GPU {g['index']}: {g.get('memory_used_mib')} MiB"
                             + "".join(f", pid {p.get('pid')} {p.get('name')}" for p in g.get("processes") or [])
                             for g in busy) or "none"
        torch = fp.get("torch")
        torch_txt = (f"{torch.get('version')} (cuda {torch.get('cuda')}, "
                     f"{'sees GPUs' if torch.get('available') else 'no GPU'})") if torch else "-"
        tk = ", ".join(f"{t.get('version')} {t.get('path')}" for t in fp.get("cuda_toolkits") or [])
        if fp.get("nvcc_version") and not tk:
            tk = f"nvcc {fp['nvcc_version']}"
        rows.append({"host": host, "gpus": gpus_txt, "memory": mem_txt,
                     "driver": f"{fp.get('driver_version') or '-'} / CUDA {fp.get('driver_cuda_version') or '-'}",
                     "toolkits": tk or "-", "torch": torch_txt, "busy": busy_txt, "verdict": verdict})
    return rows


COLUMNS = [("host", "host"), ("gpus", "GPUs (model, SM)"), ("memory", "memory"), ("driver", "driver / CUDA"),
           ("toolkits", "toolkits"), ("torch", "torch"), ("busy", "busy GPUs"), ("verdict", "verdict")]


def fleet_markdown(fleet: dict, refusals: dict | None = None) -> str:
    """The fleet table, then one section per host (GPUs, versions, problems, refusals)."""
    def cell(value):
        return str(value).replace("|", "\\|")

    rows = fleet_rows(fleet, refusals)
    out = ["# GPU fleet fingerprint", "",
           "| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(cell(r[k]) for k, _ in COLUMNS) + " |" for r in rows]
    for host in sorted(fleet):
        fp = fleet[host]
        out += ["", f"## {host}", ""]
        if fp is None:
            out.append("No fingerprint: host unreachable or the module failed.")
            continue
        out += ["| GPU | model | SM | arch | MiB used / total | processes | healthy |", "|---|---|---|---|---|---|---|"]
        for g in fp.get("gpus", []):
            procs = ", ".join(f"{p.get('pid')} {p.get('name')} ({p.get('used_mib')} MiB)"
                              for p in g.get("processes") or []) or "-"
            health = "yes" if g.get("healthy") else f"no: {g.get('problem')}"
            out.append("| " + " | ".join(cell(x) for x in (
                g.get("index"), g.get("name"), g.get("sm"), g.get("arch"),
                f"{g.get('memory_used_mib')} / {g.get('memory_total_mib')}", procs, health)) + " |")
        torch = fp.get("torch")
        out += ["", f"driver {fp.get('driver_version')} (CUDA {fp.get('driver_cuda_version')}), "
                    f"nvcc {fp.get('nvcc_version')}, toolkits: "
                    + (", ".join(f"{t.get('version')} {t.get('path')}" for t in fp.get("cuda_toolkits") or []) or "none")
                    + f", torch: {json.dumps(torch) if torch else 'not probed'}, {fp.get('os')}, glibc {fp.get('glibc')}",
                "", "sources: " + ", ".join(fp.get("sources") or [])]
        out += [f"- problem: {x}" for x in fp.get("problems") or []]
        out += [f"- refusal: {x}" for x in (refusals or {}).get(host) or []]
    return "\n".join(out) + "\n"


def fleet_text(fleet: dict, refusals: dict | None = None, width: int = 48) -> str:
    """Fixed-width fleet table (cells cut at `width`), then every verdict in full."""
    rows = fleet_rows(fleet, refusals)

    def cut(value):
        value = str(value)
        return value if len(value) <= width else value[:width - 3] + "..."

    widths = {k: max([len(h)] + [len(cut(r[k])) for r in rows]) for k, h in COLUMNS}
    out = ["  ".join(h.ljust(widths[k]) for k, h in COLUMNS), "  ".join("-" * widths[k] for k, _ in COLUMNS)]
    out += ["  ".join(cut(r[k]).ljust(widths[k]) for k, _ in COLUMNS) for r in rows]
    out.append("")
    for r in rows:
        out.append(f"{r['host']}: {r['verdict']}")
    return "\n".join(x.rstrip() for x in out) + "\n"


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="GPU host fingerprint (dflash-deploy)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--capture-dir", help="collect on this host and write the raw outputs here")
    group.add_argument("--replay-dir", help="read a capture folder instead of running anything")
    ap.add_argument("--venv-python", help="base venv python: probe its torch")
    ap.add_argument("--proc-version-path", default="/proc/driver/nvidia/version")
    args = ap.parse_args(argv)
    if args.replay_dir:
        raw = read_capture(args.replay_dir)
    else:
        raw = collect_raw(venv_python=args.venv_python, proc_version_path=args.proc_version_path)
        if args.capture_dir:
            write_capture(raw, args.capture_dir)
    json.dump(fingerprint_from_raw(raw), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
