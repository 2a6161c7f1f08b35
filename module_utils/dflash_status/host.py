"""The host now against the fingerprint its current release was made for: driver, CUDA, GPUs, toolkits, torch, OS;
and the processes on the GPUs that are not the release's own servers.

A release records the fingerprint as its digest sees it (``manifest.fingerprint``: nothing volatile) beside the
digest. Both are compared with a fingerprint taken now (the ``dflash_fingerprint`` module, read-only): the
digests say whether anything the release was made for changed, the records say what. A release made before the
record existed has only the digest: the report says so. Pure functions; no Ansible import.
"""

from __future__ import annotations

import re

from ansible.module_utils.dflash_release.manifest import fingerprint_digest, recorded_fingerprint

MAX_CHANGES = 20
UNIT_RE = re.compile(r"^dflash-(?!stage-).+\.service$")


def _walk(old, new, path, out):
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            _walk(old.get(k), new.get(k), f"{path}.{k}" if path else str(k), out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            _walk(a, b, f"{path}[{i}]", out)
    elif old != new:
        out.append(f"{path}: {_short(old)} -> {_short(new)}")


def _short(value) -> str:
    text = "absent" if value is None else (f"{len(value)} items" if isinstance(value, list | dict) else str(value))
    return text if len(text) <= 60 else text[:57] + "..."


def changes(recorded: dict, now: dict) -> list:
    """'driver_version: 580.82.09 -> 590.44.01', 'gpus[1].name: ... -> absent' ...: what differs, field by field
    (lists of a different length as their counts)."""
    out = []
    _walk(recorded or {}, recorded_fingerprint(now) or {}, "", out)
    return out[:MAX_CHANGES] + ([f"... {len(out) - MAX_CHANGES} more"] if len(out) > MAX_CHANGES else [])


def busy_processes(now: dict, gpus=None) -> list:
    """Processes on the GPUs that no dflash instance unit runs: [{gpu, pid, name, used_mib, unit}]; ``gpus``: the
    indices the release's instances use (None: every GPU)."""
    out = []
    for g in (now or {}).get("gpus") or []:
        if gpus is not None and g.get("index") not in gpus:
            continue
        for p in g.get("processes") or []:
            if not UNIT_RE.match(str(p.get("unit") or "")):
                out.append({"gpu": g.get("index"), "pid": p.get("pid"), "name": p.get("name"),
                            "used_mib": p.get("used_mib"), "unit": p.get("unit")})
    return out


def release_gpus(manifest: dict):
    """The GPU indices the release's instances were given (CUDA_VISIBLE_DEVICES of their env, when numeric);
    None when one of them names its GPUs otherwise (UUIDs) or none."""
    out = set()
    for entry in (manifest.get("instances") or {}).values():
        cvd = str(((entry or {}).get("env") or {}).get("CUDA_VISIBLE_DEVICES") or "")
        parts = [x.strip() for x in cvd.split(",") if x.strip()]
        if not parts or not all(x.isdigit() for x in parts):
            return None
        out |= {int(x) for x in parts}
    return sorted(out) if out else None


def compare(manifest: dict, now: dict | None) -> dict:
    """{checked, same, changes, recorded (the release holds the fields), busy, gpus, note}."""
    if not now:
        return {"checked": False, "same": None, "changes": [], "busy": [], "recorded": False,
                "note": "no fingerprint was taken now"}
    want = manifest.get("fingerprint_digest")
    same = fingerprint_digest(now) == want if want else None
    rec = manifest.get("fingerprint")
    gpus = release_gpus(manifest)
    out = {"checked": True, "same": same, "recorded": bool(rec), "busy": busy_processes(now, gpus), "gpus": gpus,
           "changes": [], "note": ""}
    if same is None:
        out["note"] = "the release recorded no fingerprint"
    elif not same:
        if rec:
            out["changes"] = changes(rec, now) or ["fields outside the record differ"]
        else:
            out["note"] = ("the host differs from what the release was made for; it recorded only the digest "
                           "(a deploy records the fields)")
    return out
