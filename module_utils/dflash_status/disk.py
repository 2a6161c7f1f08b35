"""Disk use of what a deploy keeps on a host: venv layers, patched trees, releases, the router's layers, the
instances' models, and the free space of the filesystems they are on.

Bytes are what the files occupy (st_blocks x 512, as ``du`` counts), each inode once within one directory (uv
hard-links a layer's files to its cache: counted once there, and the cache itself is not ours to count). A
model directory is followed through its symlinks (a Hugging Face snapshot is symlinks into ``blobs/``). Reads
only; stdlib. No Ansible import.
"""

from __future__ import annotations

import os


def usage(path: str, follow_files: bool = False) -> dict:
    """{path, bytes, files} of a directory (or a file); {path, missing: true} when it is not there; an unreadable
    entry is skipped and counted in ``unreadable``."""
    if not os.path.lexists(path):
        return {"path": path, "missing": True, "bytes": 0, "files": 0}
    seen, total, files, unreadable = set(), 0, 0, 0

    def add(p, follow):
        nonlocal total, files, unreadable
        try:
            st = os.stat(p) if follow else os.lstat(p)
        except OSError:
            unreadable += 1
            return
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return
        seen.add(key)
        total += st.st_blocks * 512
        files += 1

    if not os.path.isdir(path):
        add(path, True)
    else:
        for root, dirs, names in os.walk(path, onerror=lambda _e: None):
            for d in dirs:
                add(os.path.join(root, d), False)
            for n in names:
                add(os.path.join(root, n), follow_files)
    out = {"path": path, "bytes": total, "files": files}
    if unreadable:
        out["unreadable"] = unreadable
    return out


def _children(root: str) -> list:
    try:
        return sorted(n for n in os.listdir(root) if not n.startswith(".") and os.path.isdir(os.path.join(root, n)))
    except OSError:
        return []


def free_space(path: str) -> dict | None:
    """{path, free_bytes, total_bytes} of the filesystem holding ``path`` (its nearest existing parent)."""
    p = path
    while p and not os.path.exists(p):
        p = os.path.dirname(p.rstrip("/")) or "/"
        if p == "/":
            break
    try:
        st, dev = os.statvfs(p or "/"), os.stat(p or "/").st_dev
    except OSError:
        return None
    return {"path": p, "free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize,
            "device": dev}


def disk_use(prefix: str, models=(), used=None) -> dict:
    """{layers, trees, releases, router_layers: [{name, path, bytes, files, used}], models: [{path, bytes, files}],
    totals: {kind: bytes}, free: [filesystems]}. ``used``: {layers: paths, trees: paths, releases: ids} the kept
    releases refer to (what a prune would keep), to mark the rest."""
    used = used or {}
    out = {}
    for kind, root, key in (("layers", os.path.join(prefix, "layers"), "layers"),
                            ("trees", os.path.join(prefix, "trees"), "trees"),
                            ("releases", os.path.join(prefix, "releases"), "releases"),
                            ("router_layers", os.path.join(prefix, "router", "layers"), None)):
        rows = []
        for name in _children(root):
            path = os.path.join(root, name)
            row = dict(usage(path), name=name)
            if key:
                row["used"] = (name if kind == "releases" else path) in set(used.get(key) or ())
            rows.append(row)
        out[kind] = rows
    out["models"] = [usage(m, follow_files=True) for m in sorted(set(models)) if m]
    out["totals"] = {k: sum(r["bytes"] for r in out[k]) for k in ("layers", "trees", "releases", "router_layers",
                                                                  "models")}
    free, seen = [], set()
    for p in [prefix, *sorted(set(models))]:
        fs = free_space(p) if p else None
        if fs and fs["device"] not in seen:  # one line a filesystem
            seen.add(fs.pop("device"))
            free.append(fs)
    out["free"] = free
    return out
