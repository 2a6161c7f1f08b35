"""The tree stage's pruning: trees under ``<trees_dir>`` that none of the given release manifests uses.

Only finished trees (``sglang-*``, see ``disk.is_tree_name``) are candidates; builds in progress and
anything else a user keeps there are never touched. Release decides which releases are kept and passes
their manifests; this decides which trees may go.
"""

from __future__ import annotations

import os

from ansible.module_utils.dflash_common.trash import remove_dirs
from ansible.module_utils.dflash_tree.common import TMP_PREFIX
from ansible.module_utils.dflash_tree.disk import is_tree_name


def tree_tops(trees_dir, paths):
    """``<trees_dir>/<name>`` for each path inside ``trees_dir`` (a tree path may name a
    site-packages dir inside the tree: its top dir counts)."""
    root = os.path.normpath(trees_dir)
    tops = set()
    for path in paths:
        rel = os.path.relpath(os.path.normpath(str(path)), root)
        if rel != "." and not rel.startswith(".."):
            tops.add(os.path.join(root, rel.split(os.sep)[0]))
    return sorted(tops)


def used_trees(manifest):
    """The tree paths a release manifest uses: the release's (``tree_path``, the host's sglang version) and each
    instance's (``instances.<name>.tree_path``: an instance running another sglang version)."""
    if not isinstance(manifest, dict):
        return []
    out = [manifest["tree_path"]] if manifest.get("tree_path") else []
    for inst in (manifest.get("instances") or {}).values():
        if isinstance(inst, dict) and inst.get("tree_path"):
            out.append(inst["tree_path"])
    return out


def prune_candidates(tree_dirs, manifests, protect=(), trees_dir=None):
    """Trees of ``tree_dirs`` that no manifest's tree (``used_trees``) nor ``protect`` lies in."""
    root = trees_dir or (os.path.dirname(os.path.normpath(tree_dirs[0])) if tree_dirs else "")
    used = [p for m in manifests for p in used_trees(m)]
    keep = set(tree_tops(root, list(used) + [str(p) for p in protect]))
    return sorted(os.path.normpath(d) for d in tree_dirs
                  if is_tree_name(os.path.basename(os.path.normpath(d))) and os.path.normpath(d) not in keep)


def prune_trees(trees_dir, manifests, protect=(), check_mode=False):
    """Remove the trees under ``trees_dir`` that the given manifests (and ``protect``) do not use.
    Returns the removed paths; each is renamed aside first, so a half-removed tree never has a tree's name."""
    try:
        names = sorted(os.listdir(trees_dir))
    except OSError:
        return []
    dirs = [os.path.join(trees_dir, n) for n in names
            if os.path.isdir(os.path.join(trees_dir, n)) and not os.path.islink(os.path.join(trees_dir, n))]
    remove = prune_candidates(dirs, manifests, protect, trees_dir=trees_dir)
    if not check_mode:
        remove_dirs(remove, trees_dir, TMP_PREFIX)
    return remove
