"""nvidia-smi's failure texts (no driver, NVML mismatch, no devices) and GPUs it cannot reach."""

from __future__ import annotations

import re

from ansible.module_utils.dflash_fingerprint.values import norm_bus_id

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
