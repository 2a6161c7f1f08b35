"""A set of small files and directories put in place in one call (library/dflash_files.py, its action plugin).

Why not ansible.builtin.copy/template/file in a loop: each item is its own round trip (copy: a stat, and when the
file differs a transfer and a copy; about 25 items a host for the instances stage's launcher, boot guard and
units, 60-odd module runs a host on a first deploy and 25 on every later one). Here the controller sends every
content at once and the host compares and writes in one Python process. Stdlib only (it also runs where the
boot guard's files go, without Ansible).

Each file: ``dest`` (absolute), ``content`` (bytes), ``mode`` (octal string or int), ``owner``/``group`` (names,
default root). Each directory: ``path``, ``mode``, ``owner``, ``group`` (parents are created 0755 root, as
``file state=directory`` does). ``absent``: files or links removed (a directory there is refused, not emptied).
A file is written to a temporary sibling and renamed over ``dest``; a file whose content, mode and owners are
already right is not touched. ``check``: nothing is written, the answer says what would change.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
import tempfile

DIFF_MAX = 64 * 1024  # a text diff for files up to this size


class FilesError(Exception):
    pass


def _mode(value, where):
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 8)
    except (TypeError, ValueError):
        raise FilesError(f"{where}: mode {value!r} is not an octal number like '0644'") from None


def _ids(owner, group, where, check):
    """(uid, gid), None where the name is not on the host yet and this is check mode (a user a task before would
    create)."""
    ids = []
    for name, db, what in ((owner or "root", pwd.getpwnam, "user"), (group or "root", grp.getgrnam, "group")):
        try:
            ids.append(db(str(name))[2])
        except KeyError:
            if not check:
                raise FilesError(f"{where}: {what} {name!r} does not exist on the host") from None
            ids.append(None)
    return tuple(ids)


def _attrs_differ(st, mode, uid, gid):
    why = []
    if stat.S_IMODE(st.st_mode) != mode:
        why.append(f"mode {stat.S_IMODE(st.st_mode):04o} -> {mode:04o}")
    if uid is None or st.st_uid != uid:
        why.append("owner")
    if gid is None or st.st_gid != gid:
        why.append("group")
    return why


def _text(data: bytes):
    if len(data) > DIFF_MAX:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lstat(path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _own(path, mode, uid, gid):
    os.chown(path, uid, gid)
    os.chmod(path, mode)  # after mkdir, whose mode goes through the umask


def _mkdir(path, mode, uid, gid, check, out):
    st = _lstat(path)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise FilesError(f"{path}: wanted a directory, found another kind of file")
    if st is None:
        parent = os.path.dirname(path.rstrip("/"))
        if parent and parent != path and not os.path.isdir(parent):
            _mkdir(parent, 0o755, 0, 0, check, out)
        out.append({"path": path, "kind": "directory", "changed": True, "why": "created"})
        if not check:
            os.mkdir(path, mode)
            _own(path, mode, uid, gid)
        return
    why = _attrs_differ(st, mode, uid, gid)
    if why:
        out.append({"path": path, "kind": "directory", "changed": True, "why": ", ".join(why)})
        if not check:
            _own(path, mode, uid, gid)


def _put(dest, data, mode, uid, gid, check, out, diffs):
    st = _lstat(dest)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise FilesError(f"{dest}: wanted a regular file, found another kind of file (a directory or a link)")
    old = None
    if st is not None:
        with open(dest, "rb") as fh:
            old = fh.read()
    same = old is not None and hashlib.sha256(old).digest() == hashlib.sha256(data).digest()
    why = [] if same else (["created"] if old is None else ["content"])
    if st is not None:
        why += _attrs_differ(st, mode, uid, gid)
    if not why:
        out.append({"path": dest, "kind": "file", "changed": False, "why": ""})
        return
    out.append({"path": dest, "kind": "file", "changed": True, "why": ", ".join(why)})
    if not same:
        before, after = ("" if old is None else _text(old)), _text(data)
        if before is not None and after is not None:
            diffs.append({"before_header": dest, "after_header": dest, "before": before, "after": after})
    if check:
        return
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        _mkdir(parent, 0o755, 0, 0, check, out)
    if same:  # only the mode or the owners
        _own(dest, mode, uid, gid)
        return
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(dest)}.dflash-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchown(fh.fileno(), uid, gid)
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _remove(path, check, out):
    st = _lstat(path)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise FilesError(f"{path}: listed as absent but it is a directory (only files and links are removed)")
    out.append({"path": path, "kind": "absent", "changed": True, "why": "removed"})
    if not check:
        os.unlink(path)


def install(directories=(), files=(), absent=(), check=False) -> dict:
    """Directories first (in the order given, parents before children), then the files, then the removals.
    Returns {changed, changed_paths, items: [{path, kind, changed, why}], diff: [...]}; FilesError on bad
    input or a path of the wrong kind (what was done before it stays done: each step is whole)."""
    items, diffs = [], []
    for d in directories or ():
        path = str(d.get("path") or "")
        if not os.path.isabs(path):
            raise FilesError(f"directory {path!r}: an absolute path is needed")
        uid, gid = _ids(d.get("owner"), d.get("group"), path, check)
        _mkdir(os.path.normpath(path), _mode(d.get("mode", "0755"), path), uid, gid, check, items)
    for f in files or ():
        dest = str(f.get("dest") or "")
        if not os.path.isabs(dest) or dest.endswith("/"):
            raise FilesError(f"file {dest!r}: an absolute file path is needed")
        uid, gid = _ids(f.get("owner"), f.get("group"), dest, check)
        content = f.get("content", b"")
        if isinstance(content, str):
            content = content.encode("utf-8")
        _put(os.path.normpath(dest), content, _mode(f.get("mode", "0644"), dest), uid, gid, check, items, diffs)
    for path in absent or ():
        if not os.path.isabs(str(path)):
            raise FilesError(f"absent {path!r}: an absolute path is needed")
        _remove(os.path.normpath(str(path)), check, items)
    seen, once = set(), []
    for i in items:  # check mode: a missing parent of two directories is said once
        if (i["path"], i["kind"]) not in seen:
            seen.add((i["path"], i["kind"]))
            once.append(i)
    items = once
    changed = [i["path"] for i in items if i["changed"]]
    return {"changed": bool(changed), "changed_paths": changed, "items": items, "diff": diffs}
