"""Drift: the unit files, env files and the tree on the host against what the current release says they are.

The release records the unit files' sha256 and the env files' digests in its manifest (``files``,
module_utils/dflash_release/manifest.py EXTRA_KEYS). A file whose digest differs has drifted; what changed is
told as far as the host still holds the text to compare with:

- a unit file: against the copy the deploy rendered into ``<prefix>/units/`` when that copy is what the release
  recorded (a unified diff, a few lines), else the two digests;
- an env file: its entries against the ones the manifest lists (env with secrets masked, the launch arguments),
  secrets by presence only (never a value);
- the tree: its files against the tree's own manifest (``dflash_tree.disk.verify_tree``), the release's links.

A manifest written before the digests were recorded is read all the same: its unit files are compared with the
rendered copies, its env files by their entries, and the report says the release recorded no digest.

Each finding: {kind (unit|env|tree|link), instance, path, state (same|changed|missing|unrecorded), detail,
diff (lines)}. Reads only; stdlib and the release and tree packages. No Ansible import.
"""

from __future__ import annotations

import difflib
import hashlib
import os

from ansible.module_utils.dflash_common.secrets import MASK, SALT_FILE, is_secret_env
from ansible.module_utils.dflash_release.envfile import parse_env_file, render_env_file
from ansible.module_utils.dflash_release.journal import read_bytes
from ansible.module_utils.dflash_release.manifest import ReleaseError, digest_of
from ansible.module_utils.dflash_tree.disk import verify_tree

DIFF_LINES = 24  # lines of a unified diff kept in a finding


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _diff(old: bytes, new: bytes, old_name: str, new_name: str) -> list:
    lines = list(difflib.unified_diff(old.decode("utf-8", "replace").splitlines(),
                                      new.decode("utf-8", "replace").splitlines(), old_name, new_name, n=0,
                                      lineterm=""))
    return lines[:DIFF_LINES] + ([f"... {len(lines) - DIFF_LINES} more lines"] if len(lines) > DIFF_LINES else [])


def _changed_lines(diff: list) -> str:
    """'-RestartSec=5 +RestartSec=1' out of a unified diff (its +/- lines, not the headers)."""
    body = [ln for ln in diff if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    text = " ".join(ln.strip() for ln in body[:6])
    return text + (f" (+{len(body) - 6} more)" if len(body) > 6 else "")


def unit_names(manifest: dict) -> dict:
    """{unit file name: instance} of the release: each instance's unit, and every unit the release recorded
    (the staging units of tmpfs models too)."""
    out = {}
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        out[(entry or {}).get("unit") or f"dflash-{name}.service"] = name
    for unit, rec in sorted(((manifest.get("files") or {}).get("units") or {}).items()):
        out.setdefault(unit, (rec or {}).get("instance"))
    return out


def unit_drift(manifest: dict, unit_dir: str, staged_dir: str) -> list:
    """The release's unit files in ``unit_dir`` against its records (or, without one, the rendered copies in
    ``staged_dir``)."""
    recorded = (manifest.get("files") or {}).get("units") or {}
    out = []
    for unit, inst in unit_names(manifest).items():
        rec = recorded.get(unit) or {}
        path = rec.get("path") or os.path.join(unit_dir, unit)
        live = read_bytes(path)
        staged_path = os.path.join(staged_dir, unit)
        staged = read_bytes(staged_path)
        item = {"kind": "unit", "instance": inst, "path": path, "diff": []}
        if live is None:
            out.append(dict(item, state="missing", detail="the unit file is missing"))
            continue
        want = rec.get("sha256")
        if want:
            if _sha(live) == want:
                out.append(dict(item, state="same", detail="as the release recorded it"))
                continue
            if staged is not None and _sha(staged) == want:
                diff = _diff(staged, live, staged_path + " (as deployed)", path + " (now)")
                out.append(dict(item, state="changed", diff=diff,
                                detail=f"differs from what release {manifest.get('id')} put live: "
                                       + (_changed_lines(diff) or "whitespace")))
            else:
                out.append(dict(item, state="changed",
                                detail=f"sha256 {_sha(live)[:12]} now, release {manifest.get('id')} recorded "
                                       f"{want[:12]} (no copy of the recorded text to show the lines)"))
            continue
        # a release made before the digests were recorded: against the copy the last deploy rendered
        if staged is None:
            out.append(dict(item, state="unrecorded",
                            detail="the release recorded no digest and there is no rendered copy to compare with"))
        elif staged == live:
            out.append(dict(item, state="same", detail=f"as the rendered copy {staged_path} (the release recorded "
                                                        "no digest)"))
        else:
            diff = _diff(staged, live, staged_path + " (rendered)", path + " (now)")
            out.append(dict(item, state="changed", diff=diff,
                            detail=f"differs from the rendered copy {staged_path} (the release recorded no digest): "
                                   + (_changed_lines(diff) or "whitespace")))
    return out


def _args_change(old: str, new: str) -> str:
    a, b = old.split(), new.split()
    removed = [x for x in a if x not in b]
    added = [x for x in b if x not in a]
    return " ".join([f"-{x}" for x in removed] + [f"+{x}" for x in added]) or "reordered"


def env_entries_diff(expected: dict, found: dict, secret_names) -> list:
    """Differences between two env files' entries, in words; secrets by presence only."""
    out = []
    for key in sorted(set(expected) | set(found)):
        secret = key in secret_names or is_secret_env(key) or expected.get(key) == MASK
        if key not in found:
            out.append(f"{key} removed")
        elif key not in expected:
            out.append(f"{key} added" + ("" if secret else f" ({found[key]!r})"))
        elif secret:
            continue  # a secret's value is not in the manifest: its digest says whether it changed
        elif expected[key] != found[key]:
            if key == "DFLASH_ARGS":
                out.append(f"DFLASH_ARGS {_args_change(expected[key], found[key])}")
            else:
                out.append(f"{key} {expected[key]!r} -> {found[key]!r}")
    return out


def env_drift(prefix: str, manifest: dict) -> list:
    """Each instance's env file of the release against its recorded digest and the manifest's entries."""
    rid = manifest.get("id")
    recorded = (manifest.get("files") or {}).get("env") or {}
    salt = None
    if any((r or {}).get("hmac_sha256") for r in recorded.values()):
        salt = read_bytes(os.path.join(prefix, SALT_FILE))
    out = []
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        entry = entry or {}
        rec = recorded.get(name) or {}
        path = os.path.join(prefix, "releases", rid, rec.get("path") or f"instances/{name}.env")
        item = {"kind": "env", "instance": name, "path": path, "diff": []}
        data = read_bytes(path)
        if data is None:
            out.append(dict(item, state="missing", detail="the env file is missing"))
            continue
        secrets = set(entry.get("secrets") or [])
        try:
            expected = parse_env_file(render_env_file(
                {k: v for k, v in (entry.get("env") or {}).items()}, entry.get("args") or [], name))
        except ReleaseError as exc:
            expected, words = None, [f"the manifest's entries cannot be rendered ({exc})"]
        if expected is not None:
            expected.update({k: MASK for k in secrets})
            words = env_entries_diff(expected, parse_env_file(data.decode("utf-8", "replace")), secrets)
        want, got = digest_of(rec, data, salt)
        if want is not None and got is not None:
            if want == got:
                out.append(dict(item, state="same", detail="as the release recorded it"))
            else:
                out.append(dict(item, state="changed", diff=words,
                                detail=f"differs from what release {rid} wrote: "
                                       + ("; ".join(words) or "a comment, spacing or a secret's value")))
        elif want is not None:
            out.append(dict(item, state="unrecorded", diff=words,
                            detail=f"the host's salt ({SALT_FILE}) is unreadable: its keyed digest cannot be checked"
                                   + (f"; entries: {'; '.join(words)}" if words else "")))
        elif words:
            out.append(dict(item, state="changed", diff=words,
                            detail="differs from the manifest's entries (the release recorded no digest): "
                                   + "; ".join(words)))
        else:
            out.append(dict(item, state="same", detail="its entries are the manifest's (the release recorded no "
                                                       "digest)"))
    return out


def tree_drift(prefix: str, manifest: dict) -> list:
    """The release's links (venv, tree) and its patched tree against the tree's own manifest."""
    rid = manifest.get("id")
    rdir = os.path.join(prefix, "releases", rid)
    out = []
    for link, target in (("venv", manifest.get("venv")), ("tree", manifest.get("tree_path"))):
        if not target:
            continue
        path = os.path.join(rdir, link)
        now = os.readlink(path) if os.path.islink(path) else None
        if now != target:
            out.append({"kind": "link", "instance": None, "path": path, "state": "changed" if now else "missing",
                        "detail": f"points at {now}, the release says {target}" if now else
                        f"missing (the release says it points at {target})", "diff": []})
        elif not os.path.isdir(target):
            out.append({"kind": "link", "instance": None, "path": target, "state": "missing",
                        "detail": f"the release's {link} {target} is gone", "diff": []})
    tree = manifest.get("tree") or {}
    tdir = manifest.get("tree_path")
    if tdir and tree.get("hash") and os.path.isdir(tdir):
        ok, reason = verify_tree(tdir, tree.get("hash"))
        out.append({"kind": "tree", "instance": None, "path": tdir, "state": "same" if ok else "changed",
                    "detail": reason, "diff": []})
    # instances on another sglang version run their own venv and tree (the manifest names them, not their hash:
    # the tree is checked against its own manifest)
    seen = {manifest.get("venv"), tdir}
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        entry = entry or {}
        for kind, path in (("venv", entry.get("venv")), ("tree", entry.get("tree_path"))):
            if not path or path in seen:
                continue
            seen.add(path)
            if not os.path.isdir(path):
                out.append({"kind": "link", "instance": name, "path": path, "state": "missing",
                            "detail": f"the {kind} of sglang {entry.get('sglang_version')} is gone", "diff": []})
            elif kind == "tree":
                ok, reason = verify_tree(path)
                out.append({"kind": "tree", "instance": name, "path": path, "state": "same" if ok else "changed",
                            "detail": reason, "diff": []})
    return out


def drift(prefix: str, manifest: dict, unit_dir: str, check_tree: bool = True) -> list:
    """Every finding of the current release (units, env files, links, tree)."""
    found = unit_drift(manifest, unit_dir, os.path.join(prefix, "units")) + env_drift(prefix, manifest)
    return found + (tree_drift(prefix, manifest) if check_tree else [])
