"""Small value readers: placeholders (``[N/A]``, ``ERR!``), versions, bus ids, SM and architecture of a GPU."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_fingerprint.tables import ARCH_BY_SM, ARCH_NAMES, BRANCH_CUDA, NAME_SM

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
