"""Free disk space, and OS errors (a full disk above all) said in words instead of a traceback.

Pure functions plus os.statvfs; no Ansible import.
"""

from __future__ import annotations

import errno
import os

MIB = 1024 * 1024


def existing_ancestor(path: str) -> str:
    p = os.path.abspath(path or "/")
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def mount_point(path: str) -> str:
    p = existing_ancestor(path)
    while not os.path.ismount(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def free_space(path: str) -> dict:
    """{path, mount, free_mib, total_mib, free_inodes}; free counts what an unprivileged writer
    gets (f_bavail) less nothing: root may use the reserved blocks, the server user may not."""
    p = existing_ancestor(path)
    try:
        st = os.statvfs(p)
    except OSError as exc:
        return {"path": path, "mount": None, "error": f"{exc.strerror or exc}"}
    return {"path": path, "mount": mount_point(p), "free_mib": st.f_bavail * st.f_frsize // MIB,
            "total_mib": st.f_blocks * st.f_frsize // MIB, "free_inodes": st.f_favail if st.f_files else None}


def space_errors(facts: list, host: str, need_mib: int, field: str = "dflash_min_free_mib") -> list:
    """One error per filesystem (from free_space facts) with less than ``need_mib`` MiB (or no inode) free."""
    errors, seen = [], set()
    for f in facts or []:
        if not isinstance(f, dict) or f.get("mount") in seen or f.get("error"):
            continue
        seen.add(f.get("mount"))
        free = f.get("free_mib")
        if free is not None and free < need_mib:
            errors.append(f"{host}: disk: {f['path']} is on {f['mount']} with {free} MiB free of {f.get('total_mib')} "
                          f"MiB; a deploy needs at least {need_mib} MiB there (venv layers, the patched tree, a "
                          f"release): free space on {f['mount']} and re-run (the limit is {field})")
        elif f.get("free_inodes") == 0:
            errors.append(f"{host}: disk: {f['path']} is on {f['mount']}, which has no free inode left: "
                          "remove files there and re-run")
    return errors


def os_error_message(exc: OSError, path: str | None = None) -> str:
    """An OSError in words: what failed, where, and for a full disk how much is free."""
    where = exc.filename or path or "?"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        f = free_space(str(where))
        return (f"no space left on the device writing {where} ({f.get('free_mib', '?')} MiB free of "
                f"{f.get('total_mib', '?')} MiB on {f.get('mount') or '?'}{', disk quota' if exc.errno == errno.EDQUOT else ''}): "
                f"free space there and re-run; nothing that serves was changed by this step")
    if exc.errno == errno.EROFS:
        return f"{where} is on a read-only file system ({exc.strerror}): remount it read-write or pick another prefix"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied on {where} ({exc.strerror}): the play needs become: true (root)"
    return f"{exc.__class__.__name__} on {where}: {exc.strerror or exc}"
