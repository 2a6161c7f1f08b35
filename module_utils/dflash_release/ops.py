"""The operations of library/dflash_release.py: prepare, activate, deactivate, mark, listing, rollback, prune,
the plan for instances absent from the inventory."""

from __future__ import annotations

import datetime as _dt
import fcntl
import glob
import json
import os
import re
import shutil

from ansible.module_utils.dflash_common.secrets import load_salt, salted
from ansible.module_utils.dflash_release.envfile import env_changes, masked_env_text, render_env_file
from ansible.module_utils.dflash_release.hoststate import read_manifest_strict
from ansible.module_utils.dflash_release.journal import current_target as current_id
from ansible.module_utils.dflash_release.journal import read_bytes, record_switch
from ansible.module_utils.dflash_release.manifest import (
    INSTANCE_NAME_RE,
    MANIFEST,
    RELEASE_ID_RE,
    STATUS,
    ReleaseError,
    build_content,
    build_manifest,
    content_hash,
    diff_manifests,
    file_digest,
    instance_python_env,
    make_release_id,
    recorded_fingerprint,
)
from ansible.module_utils.dflash_release.order import (
    changed_instances,
    find_reusable,
    next_sequence,
    order_releases,
    plan_prune,
    referenced_paths,
    rollback_target,
)
from ansible.module_utils.dflash_release.store import (
    iso,
    load_releases,
    load_statuses,
    read_json,
    releases_dir,
    set_symlink,
    utc_now,
    verify_release_dir,
    write_file_atomic,
    write_release,
)


def sweep_staging(prefix: str) -> list:
    """Staging left by an interrupted run: releases/.tmp-* directories and .tmp-current-* links (one
    deploy at a time per host: nothing else writes them)."""
    gone = []
    for path in sorted(glob.glob(os.path.join(releases_dir(prefix), ".tmp-*")) +
                       glob.glob(os.path.join(prefix, ".tmp-current-*"))):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
        gone.append(path)
    return gone


def _bytes(path: str) -> int:
    if os.path.islink(path) or not os.path.isdir(path):
        try:
            return os.lstat(path).st_size
        except OSError:
            return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def _busy(directory: str, lock_name: str) -> bool:
    """Whether a stage holds its own lock file in ``directory`` (a build in progress there)."""
    path = os.path.join(directory, lock_name)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def sweep_leftovers(prefix: str, dirs=(), unit_dir: str | None = None, check_mode=False) -> dict:
    """What an interrupted run left behind (run under the host lock, so no other run is writing): the staging
    directories and temporary files of the release stage (``releases/.tmp-*``, ``.tmp-*`` in a release and under
    the prefix), of the stages whose directories are ``dirs`` (``<layers>/.tmp-*``, ``<trees>/.tmp-*``: builds,
    the tree's upload staging, half-pruned directories) and of the unit files (``<unit_dir>/.tmp-dflash-*``).
    -> {removed: [{path, bytes}], skipped: [why]}; in check mode nothing is removed (what would be)."""
    found, skipped = [], []
    patterns = [os.path.join(prefix, ".tmp-*"), os.path.join(prefix, "lock.tmp-*"),
                os.path.join(releases_dir(prefix), ".tmp-*"), os.path.join(releases_dir(prefix), "*", ".tmp-*"),
                os.path.join(releases_dir(prefix), "*", "*", ".tmp-*")]
    for d in dirs or ():
        if _busy(d, ".dflash-layers.lock"):
            skipped.append(f"{d}: a layer build holds its lock (left alone)")
            continue
        patterns.append(os.path.join(d, ".tmp-*"))
    if unit_dir:
        patterns.append(os.path.join(unit_dir, ".tmp-dflash-*"))
    for path in sorted({p for pat in patterns for p in glob.glob(pat)}):
        found.append({"path": path, "bytes": _bytes(path)})
        if check_mode:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)
    return {"removed": found, "skipped": skipped}


def drop_world_write(prefix: str) -> list:
    """Files and directories under the prefix that anyone may write (uv creates its lock files 0666): the
    write bit for others goes. Symlinks are left alone. Returns the paths changed."""
    fixed = []
    for root, dirs, files in os.walk(prefix):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not os.path.islink(path) and st.st_mode & 0o002:
                os.chmod(path, st.st_mode & 0o7775)
                fixed.append(path)
    return fixed


UNIT_RE = re.compile(r"^dflash-(stage-)?(.+)\.service$")


NOT_INSTANCE_UNITS = ("dflash-guard.service",)


def absent_plan(cur_manifest, unit_files, flags, remove_absent=False, remove=()):
    """Instances the host has (current release, installed units) that the inventory no longer lists.

    They are kept (carried into the new release unchanged, still serving) unless removal is asked for:
    ``remove_absent`` (all of them) or ``remove`` (by name). -> {carry: [names], remove: [{instance, unit,
    stage_unit, cache}], unknown: [names in ``remove`` the host does not have], kept_units: [installed
    units of absent instances that no release describes, left alone]}"""
    wanted = set(flags or {})
    units = set(unit_files or []) - set(NOT_INSTANCE_UNITS)
    installed = {m.group(2) for u in units if (m := UNIT_RE.match(u)) and not m.group(1)}
    staged = {m.group(2) for u in units if (m := UNIT_RE.match(u)) and m.group(1)}
    in_release = set((cur_manifest or {}).get("instances") or {})
    absent = (installed | in_release) - wanted
    asked = set(remove or ())
    to_remove = absent if remove_absent else absent & asked
    out = {"carry": sorted((in_release - wanted) - to_remove),
           "remove": [{"instance": n, "unit": f"dflash-{n}.service", "stage_unit": n in staged, "cache": True}
                      for n in sorted(to_remove)],
           "unknown": sorted(asked - absent - wanted),
           "kept_units": sorted(f"dflash-{n}.service" for n in (installed - wanted - in_release - to_remove))}
    # a staging unit an instance that stays no longer needs (its model_source was dropped)
    for n in sorted(staged & wanted):
        if not ((flags or {}).get(n) or {}).get("model_source"):
            out["remove"].append({"instance": n, "unit": f"dflash-stage-{n}.service", "stage_unit": False,
                                  "cache": False})
    return out


def file_records(env_texts: dict, units, salt: bytes, secret_instances, carried_units=None) -> dict:
    """The manifest's ``files`` (manifest.EXTRA_KEYS): each env file's digest (keyed with the salt where the
    instance has secrets) and each unit file's sha256. ``units``: [{instance, src, dest}] (dflash_units: the staged
    files the activation puts live at dest); ``carried_units``: [{instance, dest}] of instances kept as they are
    (their live unit file is what they run)."""
    env = {name: dict(path=f"instances/{name}.env",
                      **file_digest(text.encode("utf-8"), salt if name in secret_instances else None))
           for name, text in sorted(env_texts.items())}
    out_units = {}
    for u in list(units or []) + list(carried_units or []):
        data = read_bytes(u.get("src") or u["dest"])
        if data is not None:
            out_units[os.path.basename(u["dest"])] = dict(path=u["dest"], instance=u.get("instance"),
                                                           **file_digest(data))
    return {"units": out_units, "env": env}


def record_extras(prefix: str, manifest: dict, extras: dict, check_mode=False) -> list:
    """A reused release made before the manifest's extra keys existed gets them (old manifests stay readable;
    this fills what is missing, never changes what is there). Returns the keys added ([] when none)."""
    fill = {}
    for key, value in extras.items():
        if value is None:
            continue
        have = manifest.get(key)
        if have is None:
            fill[key] = value
        elif isinstance(have, dict) and isinstance(value, dict):
            missing = {k: v for k, v in value.items() if k not in have}
            if missing:
                fill[key] = dict(have, **missing)
    if fill and not check_mode:
        manifest.update(fill)
        write_file_atomic(os.path.join(releases_dir(prefix), manifest["id"], MANIFEST),
                          json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return sorted(fill)


def _runtime_text(m) -> str:
    m = m or {}
    return (f"venv: {m.get('venv')}\ntree: {m.get('tree_path')}\nsglang: {(m.get('tree') or {}).get('sglang_version')}\n"
            f"fingerprint: {m.get('fingerprint_digest')}\n")


def release_changes(prefix, cur, cur_manifest, manifest, env_texts) -> tuple[list, list]:
    """What switching from ``cur`` to ``manifest`` changes: (lines in words, diffs for Ansible's --diff). The
    env files are compared as the hosts has them (secret values masked, a changed secret said by name)."""
    rid = manifest["id"]
    lines = [ln for ln in diff_manifests(cur_manifest, manifest) if not ln.startswith("instance ")]
    diff = []
    if cur_manifest and _runtime_text(cur_manifest) != _runtime_text(manifest):
        diff.append({"before_header": f"release {cur} (venv, tree, host)", "after_header": f"release {rid}",
                     "before": _runtime_text(cur_manifest), "after": _runtime_text(manifest)})
    old_inst = (cur_manifest or {}).get("instances") or {}
    for name, entry in sorted((manifest.get("instances") or {}).items()):
        if entry.get("carried") or name not in env_texts:
            continue
        old_text = None
        if name in old_inst:
            try:
                with open(os.path.join(releases_dir(prefix), cur, "instances", name + ".env"), encoding="utf-8") as fh:
                    old_text = fh.read()
            except OSError:
                old_text = None
        words, secrets_changed = env_changes(old_text, env_texts[name])
        if name not in old_inst:
            words = ["new"] + words
        elif old_inst[name].get("digest") != entry.get("digest") and not words:
            words = ["runtime (venv/tree) changed"]
        if words:
            lines.append(f"instance {name}: " + "; ".join(words))
        if old_text != env_texts[name]:
            diff.append({"before_header": f"{cur}/instances/{name}.env" if old_text is not None else "(none)",
                         "after_header": f"{rid}/instances/{name}.env",
                         "before": masked_env_text(old_text or "", secrets_changed),
                         "after": masked_env_text(env_texts[name], secrets_changed)})
    for name in sorted(set(old_inst) - set(manifest.get("instances") or {})):
        lines.append(f"instance {name}: not in {rid}")
    return lines, diff


def prepare(prefix, layers, tree, flags, fingerprint, revision, dirty, host="host", check_mode=False, now=None,
            secrets=None, remove_absent=False, remove=(), unit_dir=None, units=None, extra_layers=None):
    """Find or create the release for these inputs.  Nothing is activated here.

    An instance whose sglang version is not the host's runs its own version's venv and tree (the flags entry's
    ``venv`` / ``tree_path``; ``extra_layers``: those versions' layers): its env file says so (PYTHONPATH from the
    flags, DFLASH_PYTHON here).

    ``secrets``: {instance: {VAR: value}} written to the env file only. Instances of the current
    release that the inventory no longer has are carried over unchanged unless removal is asked for
    (``remove_absent``, ``remove``; see absent_plan). ``units``: [{instance, src, dest}] (dflash_units), hashed
    into the manifest's ``files`` with the env files; the host's fingerprint is recorded beside its digest.

    Returns {id, path, created (bool: a new directory), previous (current id or None),
    activate (bool: current does not point at it yet), changed_instances, manifest, repaired,
    recorded (extra manifest keys added to a reused release), carried, remove, swept}."""
    flags = flags or {}
    secrets = secrets or {}
    swept = [] if check_mode else sweep_staging(prefix)
    unwritable = [] if check_mode else drop_world_write(prefix)
    salt = load_salt(prefix, create=not check_mode) if secrets else None
    env_texts, digest_texts = {}, {}
    release_venv = (list(layers or [])[-1:] or [{}])[0].get("path")
    for name in sorted(flags):
        if not INSTANCE_NAME_RE.match(name):
            raise ReleaseError(f"{host}: instance {name!r}: name must match {INSTANCE_NAME_RE.pattern}")
        f = flags[name] or {}
        where = f"{host}: instance {name}"
        sec = {str(k): str(v) for k, v in (secrets.get(name) or {}).items()}
        env = dict(f.get("env") or {}, **instance_python_env(f, release_venv))
        env_texts[name] = render_env_file({**env, **sec}, f.get("args") or [], where)
        digest_texts[name] = render_env_file({**env, **{k: salted(v, salt) for k, v in sec.items()}},
                                             f.get("args") or [], where)
    manifests, problems = load_releases(prefix)
    by_id = {m["id"]: m for m in manifests}
    cur = current_id(prefix)
    cur_manifest = by_id.get(cur)
    unit_files = [os.path.basename(p) for p in glob.glob(os.path.join(unit_dir, "dflash-*.service"))] if unit_dir else []
    absent = absent_plan(cur_manifest, unit_files, flags, remove_absent, remove)
    carried = {}
    for name in absent["carry"]:
        try:
            with open(os.path.join(releases_dir(prefix), cur, "instances", name + ".env"), encoding="utf-8") as fh:
                env_texts[name] = fh.read()
            carried[name] = cur_manifest["instances"][name]
        except OSError as exc:
            problems.append(f"instance {name} (not in the inventory, kept): its env file in {cur} is unreadable "
                            f"({exc.__class__.__name__}); it is not carried into the new release")
    content = build_content(layers, tree, flags, fingerprint, digest_texts,
                            {n: list(secrets.get(n) or {}) for n in flags}, carried, extra_layers)
    secret_instances = {n for n in flags if secrets.get(n)} | {n for n, e in carried.items() if e.get("secrets")}
    if secret_instances and salt is None:
        salt = load_salt(prefix, create=not check_mode)  # a carried instance's key, none in the inventory's
    extras = {"files": file_records(env_texts, units, salt, secret_instances,
                                    [{"instance": n, "dest": os.path.join(unit_dir, f"dflash-{n}.service")}
                                     for n in sorted(carried)] if unit_dir else None),
              "fingerprint": recorded_fingerprint(fingerprint)}
    chash = content_hash(content)
    reuse = find_reusable(manifests, chash)
    repairs, restart_repaired = [], []
    if cur and cur_manifest is None:
        _m, why = read_manifest_strict(prefix, cur)
        repairs.append(f"current release {cur}: {why or 'its manifest cannot be used'}: it cannot be compared nor "
                       "reused; the release made from the inventory replaces it (every instance restarts and is "
                       f"smoke-tested; releases/{cur} is left on disk as it is)")
    result = {"previous": cur if cur_manifest else None, "problems": problems, "repaired": [], "recorded": [],
              "carried": sorted(carried), "remove": absent["remove"], "remove_unknown": absent["unknown"],
              "kept_units": absent["kept_units"], "swept": swept, "world_writable_fixed": len(unwritable)}
    if reuse:
        rid = reuse["id"]
        manifest = reuse
        result["created"] = False
        fix = verify_release_dir(prefix, reuse, env_texts)
        if fix and not check_mode:
            # a reused release whose files drifted (edited by hand): put them back
            path = os.path.join(releases_dir(prefix), rid)
            os.makedirs(os.path.join(path, "instances"), mode=0o755, exist_ok=True)
            for name, text in env_texts.items():
                write_file_atomic(os.path.join(path, "instances", name + ".env"), text, 0o600)
            for link, target in (("venv", reuse.get("venv")), ("tree", reuse.get("tree_path"))):
                if target:
                    set_symlink(os.path.join(path, link), target)
        result["repaired"] = [f["path"] for f in fix]
        for f in fix:
            what = {"edited": "was edited on the host (it differs from what the release wrote)",
                    "missing": "was missing", "link": f"did not point at {f.get('target')}"}[f["what"]]
            if rid == cur:
                who = [f["instance"]] if f["instance"] else sorted(manifest.get("instances") or {})
                restart_repaired += [n for n in who if n not in restart_repaired]
                after = f": put back; {', '.join(who)} restarted and smoke-tested so that what serves is the release's"
            else:
                after = ": put back"
            repairs.append(f"release {rid}: {f['path']} {what}{after if not check_mode else ' (check mode: would be put back)'}")
        result["recorded"] = record_extras(prefix, manifest, extras, check_mode)
    else:
        now = now or utc_now()
        rid = make_release_id(now, chash)
        while os.path.lexists(os.path.join(releases_dir(prefix), rid)):
            # a directory of that name without a usable manifest (a broken release, left as it is): the next second
            now += _dt.timedelta(seconds=1)
            rid = make_release_id(now, chash)
        manifest = build_manifest(
            content, rid, next_sequence(manifests), iso(now), revision, dirty, result["previous"]
        )
        manifest.update({k: v for k, v in extras.items() if v is not None})
        result["created"] = True
        if not check_mode:
            write_release(prefix, manifest, env_texts)
    if cur == rid:
        result["previous"] = manifest.get("previous")
        result["changes"], result["diff"] = [], []
    else:
        result["changes"], result["diff"] = release_changes(prefix, cur, cur_manifest, manifest, env_texts)
    result.update(
        repairs=repairs,
        restart_repaired=sorted(restart_repaired),
        status=(load_statuses(prefix, [rid]).get(rid) or {}).get("status", "unknown"),
        id=rid,
        path=os.path.join(releases_dir(prefix), rid),
        activate=(cur != rid),
        changed_instances=changed_instances(manifest, cur_manifest if cur != rid else manifest),
        manifest=manifest,
    )
    if cur != rid and cur_manifest is None:
        result["changed_instances"] = sorted(manifest.get("instances") or {})
    return result


def activate(prefix: str, release_id: str, check_mode=False) -> dict:
    """Point ``<prefix>/current`` at ``releases/<id>`` (relative link, atomic rename)."""
    path = os.path.join(releases_dir(prefix), release_id)
    exists = os.path.isfile(os.path.join(path, MANIFEST))
    # in check mode a release that prepare would create does not exist yet
    if not RELEASE_ID_RE.match(release_id) or not (exists or check_mode):
        raise ReleaseError(f"release {release_id}: {path}/{MANIFEST} not found")
    before = current_id(prefix)
    if before == release_id:
        return {"changed": False, "previous": before, "current": release_id}
    if not check_mode:
        set_symlink(os.path.join(prefix, "current"), os.path.join("releases", release_id))
        record_switch(prefix, before, release_id, "activate")
    return {"changed": True, "previous": before, "current": release_id}


def deactivate(prefix: str, check_mode=False) -> dict:
    """Remove the current link (a first deploy that failed has nothing to go back to)."""
    link = os.path.join(prefix, "current")
    before = current_id(prefix)
    if before is None:
        return {"changed": False, "previous": None, "current": None}
    if not check_mode:
        os.unlink(link)
        record_switch(prefix, before, None, "deactivate")
    return {"changed": True, "previous": before, "current": None}


def mark(prefix: str, release_id: str, status: str, detail: dict, check_mode=False, now=None) -> dict:
    """Record the smoke verdict of a release (status.json); changed only when status differs."""
    if status not in ("healthy", "failed"):
        raise ReleaseError(f"status must be healthy or failed, got {status!r}")
    path = os.path.join(releases_dir(prefix), release_id, STATUS)
    try:
        old = read_json(path)
    except (OSError, ValueError):
        old = None
    if old and old.get("status") == status and old.get("detail") == detail:
        return {"changed": False, "status": old}
    new = {"status": status, "at": iso(now or utc_now()), "detail": detail}
    if not check_mode:
        write_file_atomic(path, json.dumps(new, indent=2, sort_keys=True) + "\n")
    return {"changed": True, "status": new}


def listing(prefix: str) -> dict:
    """All releases, oldest first, with their status and which one is current."""
    manifests, problems = load_releases(prefix)
    ordered = order_releases(manifests)
    statuses = load_statuses(prefix, [m["id"] for m in ordered])
    cur = current_id(prefix)
    rows = [
        {
            "id": m["id"],
            "sequence": m.get("sequence"),
            "created": m.get("created"),
            "revision": (m.get("toolkit") or {}).get("revision"),
            "dirty": (m.get("toolkit") or {}).get("dirty"),
            "instances": sorted(m.get("instances") or {}),
            "status": (statuses.get(m["id"]) or {}).get("status", "unknown"),
            "current": m["id"] == cur,
        }
        for m in ordered
    ]
    lines = [
        f"{row['id']}  seq {row['sequence']}  {row['created']}  {row['status']}"
        f"  rev {str(row['revision'])[:12]}{'-dirty' if row['dirty'] else ''}"
        f"  [{', '.join(row['instances'])}]{'  <- current' if row['current'] else ''}"
        for row in rows
    ]
    return {"releases": rows, "current": cur, "problems": problems, "lines": lines}


def plan_rollback(prefix: str, rollback_to: str | None = None, healthy_only: bool = False) -> dict:
    manifests, problems = load_releases(prefix)
    by_id = {m["id"]: m for m in manifests}
    cur = current_id(prefix)
    statuses = load_statuses(prefix, list(by_id))
    target = rollback_target(manifests, statuses, cur, rollback_to, healthy_only)
    cur_m = by_id.get(cur)
    return {
        "current": cur,
        "target": target["id"],
        "changes": diff_manifests(cur_m, target) if target["id"] != cur else [],
        "changed_instances": changed_instances(target, cur_m) if target["id"] != cur else [],
        "instances": sorted(target.get("instances") or {}),
        "problems": problems,
    }


def rollback(prefix: str, rollback_to: str | None = None, check_mode=False) -> dict:
    """Plan and switch in one step (rollback.yml): the listing, the plan, then ``current`` moved
    to the target (not in check mode)."""
    out = plan_rollback(prefix, rollback_to)
    out["lines"] = listing(prefix)["lines"]
    out["changed"] = out["target"] != out["current"]
    if out["changed"] and not check_mode:
        activate(prefix, out["target"])
    return out


def prune(prefix: str, keep: int, protect=(), check_mode=False) -> dict:
    """Delete releases beyond the newest ``keep`` (never current nor ``protect``). The trees and layers
    belong to their stages: this only says what the kept releases use (``kept_manifests``, for the tree
    and layers stages' own prune, and the referenced paths, for the record)."""
    manifests, problems = load_releases(prefix)
    cur = current_id(prefix)
    keep_ids, remove_ids = plan_prune(manifests, keep, tuple(protect) + (cur,))
    if not check_mode:
        for rid in remove_ids:
            shutil.rmtree(os.path.join(releases_dir(prefix), rid))
    kept = [m for m in manifests if m["id"] in keep_ids]
    refs = referenced_paths(kept)
    return {
        "changed": bool(remove_ids),
        "kept": keep_ids,
        "removed": remove_ids,
        "kept_manifests": [
            dict({k: m[k] for k in ("id", "sequence", "created", "layers", "venv", "tree_path") if k in m},
                 instances={n: {k: i[k] for k in ("venv", "tree_path") if i.get(k)}
                            for n, i in (m.get("instances") or {}).items()})
            for m in kept
        ],
        "referenced_layers": refs["layers"],
        "referenced_trees": refs["trees"],
        "problems": problems,
    }
