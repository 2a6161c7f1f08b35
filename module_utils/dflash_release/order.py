"""Releases ordered by the manifests' ``sequence`` (then ``created``, then id), never by file times;
keep-N, pruning plans, the rollback target."""

from __future__ import annotations

from ansible.module_utils.dflash_release.manifest import ReleaseError


def order_key(manifest: dict):
    return (int(manifest.get("sequence") or 0), str(manifest.get("created") or ""), str(manifest["id"]))


def order_releases(manifests) -> list:
    """Oldest first, from the manifests' sequence/created (never mtimes)."""
    return sorted(manifests, key=order_key)


def next_sequence(manifests) -> int:
    return max((int(m.get("sequence") or 0) for m in manifests), default=0) + 1


def find_reusable(manifests, chash: str):
    """The newest release with this content hash, or None."""
    same = [m for m in manifests if m.get("content_hash") == chash]
    return order_releases(same)[-1] if same else None


def changed_instances(new: dict, old: dict | None) -> list:
    """Instances of ``new`` whose digest (venv, tree, env file) differs from ``old``."""
    old_inst = (old or {}).get("instances") or {}
    return sorted(
        name
        for name, inst in (new.get("instances") or {}).items()
        if (old_inst.get(name) or {}).get("digest") != inst.get("digest")
    )


def plan_prune(manifests, keep: int, protect=()) -> tuple[list, list]:
    """(kept ids, removed ids): the newest ``keep`` releases plus every id in ``protect``
    (current, and the previous one while a new release is not yet proven)."""
    if keep < 1:
        raise ReleaseError(f"dflash_release_keep must be >= 1, got {keep}")
    ordered = order_releases(manifests)
    kept = {m["id"] for m in ordered[-keep:]} | {p for p in protect if p}
    keep_ids = [m["id"] for m in ordered if m["id"] in kept]
    remove_ids = [m["id"] for m in ordered if m["id"] not in kept]
    return keep_ids, remove_ids


def referenced_paths(manifests) -> dict:
    """Layer and tree paths that the given releases refer to (these must not be pruned)."""
    layers, trees = set(), set()
    for m in manifests:
        for layer in m.get("layers") or []:
            if layer.get("path"):
                layers.add(layer["path"])
        if m.get("venv"):
            layers.add(m["venv"])
        if m.get("tree_path"):
            trees.add(m["tree_path"])
        for inst in (m.get("instances") or {}).values():  # an instance of another sglang version than the host's
            if (inst or {}).get("venv"):
                layers.add(inst["venv"])
            if (inst or {}).get("tree_path"):
                trees.add(inst["tree_path"])
    return {"layers": sorted(layers), "trees": sorted(trees)}


def rollback_target(manifests, statuses: dict, current_id: str | None, rollback_to: str | None = None,
                    healthy_only: bool = False):
    """The release to go back to: ``rollback_to`` when given (must exist), else the newest
    release older than current (by sequence) whose smoke test did not fail (``healthy_only``: that passed)."""
    by_id = {m["id"]: m for m in manifests}
    if rollback_to:
        if rollback_to not in by_id:
            known = ", ".join(m["id"] for m in order_releases(manifests)) or "none"
            raise ReleaseError(f"rollback_to={rollback_to}: no such release (known: {known})")
        return by_id[rollback_to]
    ordered = order_releases(manifests)
    if current_id in by_id:
        ordered = [m for m in ordered if order_key(m) < order_key(by_id[current_id])]
    candidates = [m for m in ordered if (statuses.get(m["id"]) or {}).get("status") != "failed"
                  and (not healthy_only or (statuses.get(m["id"]) or {}).get("status") == "healthy")]
    if not candidates:
        raise ReleaseError(f"no {'healthy ' if healthy_only else ''}release to go back to "
                           f"(current: {current_id or 'none'})")
    return candidates[-1]
