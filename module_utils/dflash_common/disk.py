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


def uv_cache_dir(explicit: str | None = None, environ=None, home: str | None = None) -> str:
    """The directory uv caches in, found as uv finds it: --cache-dir/UV_CACHE_DIR (``explicit``: what the toolkit
    passes), else $UV_CACHE_DIR, else $XDG_CACHE_HOME/uv, else ~/.cache/uv of the user that runs it."""
    env = os.environ if environ is None else environ
    if explicit:
        return explicit
    if env.get("UV_CACHE_DIR"):
        return env["UV_CACHE_DIR"]
    if env.get("XDG_CACHE_HOME"):
        return os.path.join(env["XDG_CACHE_HOME"], "uv")
    return os.path.join(home or os.path.expanduser("~"), ".cache", "uv")


def space_errors(facts: list, host: str, need_mib: int, field: str = "dflash_min_free_mib") -> list:
    """One error per filesystem (from free_space facts, each with ``what`` the deploy writes there) with less than
    ``need_mib`` MiB (or no inode) free; the cause first: 'no space left on <dir>: need N MiB, have M MiB'."""
    by_mount = {}
    for f in facts or []:
        if isinstance(f, dict) and not f.get("error"):
            by_mount.setdefault(f.get("mount"), []).append(f)
    errors = []
    for mount, group in by_mount.items():
        f = group[0]
        paths = ", ".join(dict.fromkeys(g["path"] for g in group))
        whats = "; ".join(dict.fromkeys(f"{g['path']}: {g['what']}" for g in group if g.get("what")))
        written = f" (written there: {whats})" if whats else ""
        free = f.get("free_mib")
        if free is not None and free < need_mib:
            errors.append(f"{host}: no space left on {paths}: need {need_mib} MiB, have {free} MiB free on {mount} "
                          f"(of {f.get('total_mib')} MiB){written}: free space on {mount} and re-run (the limit is "
                          f"{field})")
        elif f.get("free_inodes") == 0:
            errors.append(f"{host}: no inode left on {paths}: {mount} has no free inode{written}: remove files "
                          "there and re-run")
    return errors


NO_SPACE_WORDS = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122", "ENOSPC")


def no_space_headline(text: str, candidates) -> str | None:
    """When ``text`` (a tool's output) says the disk was full: 'no space left on <dir>: have M MiB free of T MiB on
    <mount>' for the fullest of ``candidates`` ([(path, what)]: where that step writes), else None."""
    if not any(w in (text or "") for w in NO_SPACE_WORDS):
        return None
    best = None
    for path, what in candidates:
        f = free_space(path)
        if f.get("free_mib") is not None and (best is None or f["free_mib"] < best[0]["free_mib"]):
            best = (f, what)
    if best is None:
        return "no space left on the device (its free space could not be read)"
    f, what = best
    return (f"no space left on {f['path']} ({what}): have {f['free_mib']} MiB free of {f['total_mib']} MiB on "
            f"{f['mount']}")


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
