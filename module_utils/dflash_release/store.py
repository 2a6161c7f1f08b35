"""Releases on disk: read, written atomically, verified; the ``current`` link."""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil

from ansible.module_utils.dflash_release.journal import read_bytes, write_atomic
from ansible.module_utils.dflash_release.manifest import MANIFEST, STATUS, ReleaseError, file_digest


def releases_dir(prefix: str) -> str:
    return os.path.join(prefix, "releases")


def read_json(path: str):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_releases(prefix: str) -> tuple[list, list]:
    """(manifests, problems).  A directory without a readable manifest is a problem, not a
    release (it is never current-able nor pruned silently)."""
    root = releases_dir(prefix)
    manifests, problems = [], []
    if not os.path.isdir(root):
        return manifests, problems
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name.startswith(".") or not os.path.isdir(path) or os.path.islink(path):
            continue
        try:
            m = read_json(os.path.join(path, MANIFEST))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: no readable {MANIFEST} ({exc.__class__.__name__})")
            continue
        if m.get("id") != name:
            problems.append(f"{path}: manifest id {m.get('id')!r} does not match the directory")
            continue
        manifests.append(m)
    return manifests, problems


def load_statuses(prefix: str, ids) -> dict:
    out = {}
    for rid in ids:
        try:
            out[rid] = read_json(os.path.join(releases_dir(prefix), rid, STATUS))
        except (OSError, ValueError):
            out[rid] = None
    return out


def write_file_atomic(path: str, text: str, mode: int = 0o644) -> bool:
    """Write when the content differs; returns True when it changed."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text and (os.stat(path).st_mode & 0o777) == mode:
                return False
    except OSError:
        pass
    write_atomic(path, text.encode("utf-8"), mode)
    return True


def set_symlink(link: str, target: str) -> bool:
    """Point ``link`` at ``target`` atomically (rename over); True when it changed."""
    if os.path.islink(link) and os.readlink(link) == target:
        return False
    if os.path.exists(link) and not os.path.islink(link):
        raise ReleaseError(f"{link} exists and is not a symlink; refusing to replace it")
    tmp = os.path.join(os.path.dirname(link), f".tmp-{os.path.basename(link)}-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return True


def write_release(prefix: str, manifest: dict, env_texts: dict) -> str:
    """Create ``releases/<id>`` (built in ``releases/.tmp-<id>`` then renamed).  Returns path."""
    root = releases_dir(prefix)
    os.makedirs(root, mode=0o755, exist_ok=True)
    final = os.path.join(root, manifest["id"])
    if os.path.exists(final):
        raise ReleaseError(f"{final} already exists")
    tmp = os.path.join(root, ".tmp-" + manifest["id"])
    if os.path.lexists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(os.path.join(tmp, "instances"), mode=0o755)
    os.chmod(tmp, 0o755)
    os.chmod(os.path.join(tmp, "instances"), 0o755)
    try:
        for name, text in env_texts.items():
            write_file_atomic(os.path.join(tmp, "instances", name + ".env"), text, 0o600)
        if manifest.get("venv"):
            os.symlink(manifest["venv"], os.path.join(tmp, "venv"))
        if manifest.get("tree_path"):
            os.symlink(manifest["tree_path"], os.path.join(tmp, "tree"))
        # the manifest last: a directory with a manifest is a complete release
        write_file_atomic(os.path.join(tmp, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def verify_release_dir(prefix: str, manifest: dict, env_texts: dict) -> list:
    """Differences between a reused release directory and what it should hold:
    [{path, instance (None for a link), what: 'edited' | 'missing' | 'link', target}]."""
    path = os.path.join(releases_dir(prefix), manifest["id"])
    problems = []
    for name, text in sorted(env_texts.items()):
        p = os.path.join(path, "instances", name + ".env")
        try:
            with open(p, encoding="utf-8") as fh:
                if fh.read() != text:
                    problems.append({"path": p, "instance": name, "what": "edited"})
        except OSError:
            problems.append({"path": p, "instance": name, "what": "missing"})
    for link, target in (("venv", manifest.get("venv")), ("tree", manifest.get("tree_path"))):
        lp = os.path.join(path, link)
        if target and (not os.path.islink(lp) or os.readlink(lp) != target):
            problems.append({"path": lp, "instance": None, "what": "link", "target": target})
    return problems


def record_live_units(prefix: str, release_id: str, units, gone=()) -> bool:
    """Once an activation committed: the unit files it put live, as they are now, into the release's manifest
    (``files.units``, manifest.EXTRA_KEYS), and the unit files of the instances it removed out of it. ``units``:
    [{dest, instance}] of the activation's journal; ``gone``: unit file names removed. True when the manifest
    changed."""
    path = os.path.join(releases_dir(prefix), release_id, MANIFEST)
    try:
        m = read_json(path)
    except (OSError, ValueError):
        return False
    recorded = ((m.get("files") or {}).get("units") or {})
    new = dict(recorded)
    for u in units or []:
        data = read_bytes(u["dest"])
        name = os.path.basename(u["dest"])
        if data is None:
            new.pop(name, None)
        else:
            new[name] = dict(path=u["dest"], instance=u.get("instance"), **file_digest(data))
    for name in gone or ():
        new.pop(name, None)
    if new == recorded and "files" in m:
        return False
    m["files"] = dict(m.get("files") or {}, units=new)
    write_file_atomic(path, json.dumps(m, indent=2, sort_keys=True) + "\n")
    return True


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def iso(now: _dt.datetime) -> str:
    return now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
