"""The tree on the host: written in a temporary sibling and renamed into place, verified, reused, cleaned."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from ansible.module_utils.dflash_tree.common import (
    FILES_LIST,
    MANIFEST,
    MANIFEST_FORMAT,
    OLD_PREFIX,
    TMP_PREFIX,
    TREE_PREFIX,
    TreeError,
    sha256_bytes,
    sha256_file,
)
from ansible.module_utils.dflash_tree.source import _walk_files
from ansible.module_utils.dflash_tree.wheel import files_listing


def read_manifest(tree_dir):
    path = os.path.join(tree_dir, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def scan_tree(tree_dir):
    """sha256 of every file in the tree's package (caches skipped)."""
    return {rel: sha256_file(os.path.join(tree_dir, rel)) for rel in _walk_files(tree_dir)}


def verify_tree(tree_dir, expected_hash=None):
    """Is the tree on disk exactly what its manifest says? Returns (ok, reason)."""
    if not os.path.isdir(tree_dir):
        return False, "absent"
    manifest = read_manifest(tree_dir)
    if manifest is None:
        return False, f"no readable {MANIFEST}"
    if manifest.get("format") != MANIFEST_FORMAT:
        return False, "manifest format {!r}".format(manifest.get("format"))
    if expected_hash and manifest.get("hash") != expected_hash:
        return False, "manifest hash {} differs from {}".format(manifest.get("hash"), expected_hash)
    try:
        found = scan_tree(tree_dir)
    except TreeError as e:
        return False, str(e)
    if sha256_bytes(files_listing(found)) == manifest.get("tree_sha256"):
        return True, "matches its manifest"
    recorded = {}
    try:
        with open(os.path.join(tree_dir, FILES_LIST), encoding="utf-8") as f:
            for row in f:
                digest, _, rel = row.rstrip("\n").partition("  ")
                recorded[rel] = digest
    except OSError:
        pass
    diffs = sorted(p for p in set(found) | set(recorded) if found.get(p) != recorded.get(p))
    detail = (": " + ", ".join(diffs[:5]) + (" ..." if len(diffs) > 5 else "")) if diffs else ""
    return False, f"files differ from the manifest{detail}"


def _remove_pycache(tree_dir, relpaths):
    """Drop the bytecode caches of touched modules (and any stray ones: a fresh tree has none)."""
    removed = []
    dirs = {os.path.dirname(os.path.join(tree_dir, p)) for p in relpaths}
    for d in sorted(dirs):
        cache = os.path.join(d, "__pycache__")
        if os.path.isdir(cache):
            shutil.rmtree(cache)
            removed.append(os.path.relpath(cache, tree_dir))
    return removed


def write_tree(plan, tree_dir):
    """Write the plan into a temporary sibling of tree_dir and rename it into place."""
    parent = os.path.dirname(tree_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=TMP_PREFIX + os.path.basename(tree_dir) + "-", dir=parent)
    try:
        os.chmod(tmp, 0o755)
        wheel = plan["wheel"]
        contents = plan["contents"]
        for rel in sorted(plan["file_hashes"]):
            if rel in contents:
                data = contents[rel]
            else:
                data = wheel.read(rel)
            dest = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
            with open(dest, "wb") as f:
                f.write(data)
            os.chmod(dest, plan["modes"].get(rel, 0o644))
        listing = files_listing(plan["file_hashes"])
        with open(os.path.join(tmp, FILES_LIST), "wb") as f:
            f.write(listing)
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(plan["manifest"], f, indent=2, sort_keys=True)
            f.write("\n")
        for fn in (FILES_LIST, MANIFEST):
            os.chmod(os.path.join(tmp, fn), 0o644)
        for dirpath, _dirnames, _filenames in os.walk(tmp):
            os.chmod(dirpath, 0o755)  # readable by the service user whatever the umask
        _remove_pycache(tmp, contents)
        ok, reason = verify_tree(tmp, plan["manifest"]["hash"])
        if not ok:
            raise TreeError(f"tree written to {tmp} does not verify: {reason}")
        old = None
        if os.path.lexists(tree_dir):
            old = tempfile.mkdtemp(prefix=OLD_PREFIX + os.path.basename(tree_dir) + "-", dir=parent)
            os.rmdir(old)
            os.rename(tree_dir, old)
        os.rename(tmp, tree_dir)
        tmp = None
        if old:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp and os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def clean_leftovers(trees_dir):
    """Remove temporary build dirs left behind by an interrupted run (never a finished tree)."""
    removed = []
    if not os.path.isdir(trees_dir):
        return removed
    for fn in sorted(os.listdir(trees_dir)):
        if fn.startswith((TMP_PREFIX + TREE_PREFIX, OLD_PREFIX + TREE_PREFIX)):
            full = os.path.join(trees_dir, fn)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
                removed.append(fn)
    return removed


def fact_from_manifest(manifest, tree_dir):
    """The ``dflash_tree`` fact (docs/design.md)."""
    return {
        "name": manifest["name"],
        "hash": manifest["hash"],
        "path": tree_dir,
        "site_packages": tree_dir,
        "manifest": os.path.join(tree_dir, MANIFEST),
        "source": manifest["source"],
        "sglang_version": manifest["sglang_version"],
        "wheel_name": (manifest.get("wheel") or {}).get("name"),
        "wheel_sha256": (manifest.get("wheel") or {}).get("sha256"),
        "src": manifest.get("src"),
        "patches": [{"name": p["name"], "sha256": p["sha256"]} for p in manifest["patches"]],
        "files": {p: v["sha256"] for p, v in manifest["files"].items()},
        "tree_sha256": manifest["tree_sha256"],
    }


def ensure_tree(plan, trees_dir, check_mode=False):
    """Make ``<trees_dir>/<plan name>`` hold exactly the plan. Returns ``{changed, reason, tree}``.

    A tree whose manifest hash and files match is left alone (nothing written). Otherwise it is
    (re)built in a temporary sibling and renamed into place.
    """
    manifest = plan["manifest"]
    tree_dir = os.path.join(trees_dir, manifest["name"])
    ok, reason = verify_tree(tree_dir, manifest["hash"])
    leftovers = []
    if os.path.isdir(trees_dir):
        leftovers = [
            fn
            for fn in os.listdir(trees_dir)
            if fn.startswith((TMP_PREFIX + TREE_PREFIX, OLD_PREFIX + TREE_PREFIX))
        ]
    result = {"tree": fact_from_manifest(manifest, tree_dir), "manifest": manifest}
    if ok:
        result.update(changed=bool(leftovers), reason="already in place: " + reason)
        if leftovers and not check_mode:
            clean_leftovers(trees_dir)
        result["leftovers_removed"] = leftovers
        return result
    result.update(changed=True, reason="{}: {}".format("build" if reason == "absent" else "rebuild", reason))
    result["leftovers_removed"] = leftovers
    if check_mode:
        return result
    clean_leftovers(trees_dir)
    write_tree(plan, tree_dir)
    return result


def close_plan(plan):
    if plan.get("wheel") is not None:
        plan["wheel"].close()


def plan_summary(plan):
    """What the controller-side dry run returns: no file contents, just the facts."""
    m = plan["manifest"]
    return {
        "name": m["name"],
        "hash": m["hash"],
        "sglang_version": m["sglang_version"],
        "wheel": m["wheel"],
        "patches": m["patches"],
        "files": m["files"],
        "tree_sha256": m["tree_sha256"],
    }


def is_tree_name(name):
    return name.startswith(TREE_PREFIX) and not name.startswith((TMP_PREFIX, OLD_PREFIX))
