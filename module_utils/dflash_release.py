"""Releases: content-derived ids, manifests, ordering, keep-N, pruning, activation.

A release is ``<prefix>/releases/<id>/`` holding everything the instances run:

    manifest.json            id, sequence, created, content hash, toolkit revision, layers,
                             tree manifest digest, per-instance flags + applied fallbacks,
                             fingerprint digest, previous release id
    venv -> <final layer path>
    tree -> <patched tree path>            (when the tree stage produced one)
    instances/<name>.env     0600, systemd EnvironmentFile syntax, DFLASH_ARGS=<args>
    status.json              written after the smoke test: healthy | failed (+ per instance)
    smoke/<name>.json        the smoke record of each instance

``<prefix>/current -> releases/<id>`` is what the units read.  The id is
``<UTC yyyymmddThhmmss>-<content hash8>``; an unchanged re-run finds the newest release with the
same content hash and reuses it (no new directory, no change).  Releases are ordered by the
manifests' ``sequence`` (then ``created``, then id), never by file times.

Pure functions plus small filesystem helpers; no Ansible import (pytest imports this directly).
"""

from __future__ import annotations

import datetime as _dt
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile

try:
    from ansible.module_utils.dflash_activation import current_target as current_id
    from ansible.module_utils.dflash_secrets import MASK, is_secret_env, load_salt, salted
except ImportError:  # pytest / the controller: module_utils/ on sys.path
    from dflash_activation import current_target as current_id
    from dflash_secrets import MASK, is_secret_env, load_salt, salted

SCHEMA = 1
MANIFEST = "manifest.json"
STATUS = "status.json"
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RELEASE_ID_RE = re.compile(r"^\d{8}T\d{6}-[0-9a-f]{8}$")
INSTANCE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

# Fingerprint fields that change while the same host runs the same software: memory in use,
# the processes on the GPUs (our own servers show up there), derived health verdicts and where
# the data came from.  Everything else (GPU identity, SM, driver, toolkits, torch, OS, glibc)
# is part of what a release was made for.
VOLATILE_FINGERPRINT_KEYS = frozenset(
    {
        "memory_used_mib",
        "memory_free_mib",
        "processes",
        "process_units",
        "utilization_gpu",
        "utilization_memory",
        "temperature_gpu",
        "power_draw_w",
        "healthy",
        "problem",
        "problems",
        "sources",
        "null_reasons",  # which cells were placeholders can change between two reads of one host
    }
)


class ReleaseError(Exception):
    """Bad input or a broken release directory; the message names what and where."""


# ----------------------------------------------------------------------------- hashing


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _strip_volatile(obj):
    if isinstance(obj, dict):
        return {k: _strip_volatile(v) for k, v in obj.items() if k not in VOLATILE_FINGERPRINT_KEYS}
    if isinstance(obj, list):
        return [_strip_volatile(v) for v in obj]
    return obj


def fingerprint_digest(fingerprint) -> str | None:
    """sha256 of the canonical fingerprint minus volatile fields; None when there is none."""
    if not fingerprint:
        return None
    return sha256_hex(canonical_json(_strip_volatile(fingerprint)))


def tree_summary(tree) -> dict | None:
    """The tree manifest as a release records it: everything but the per-file map, which is
    replaced by its digest and size (the full map stays in the tree's own manifest.json)."""
    if not tree:
        return None
    out = {k: v for k, v in tree.items() if k != "files"}
    files = tree.get("files")
    if files is not None:
        out["files_sha256"] = sha256_hex(canonical_json(files))
        out["files_count"] = len(files)
    return out


# ----------------------------------------------------------------------------- env files


def _quote_env_value(value: str) -> str:
    # systemd EnvironmentFile: inside double quotes a backslash escapes  "  \  `  $  and
    # newlines would continue the value, so those are escaped / refused.
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + out + '"'


def render_env_file(env: dict, args: list, where: str) -> str:
    """EnvironmentFile text for one instance: the env (sorted) then DFLASH_ARGS.

    ``where`` names host/instance for error messages.  The unit expands ``$DFLASH_ARGS``
    unquoted, which systemd splits at whitespace without any quote handling: an argument that
    contains whitespace cannot survive that and is refused here rather than mangled."""
    lines = ["# managed by dflash-deploy (dflash_release); read by dflash-<instance>.service"]
    for key in sorted(env or {}):
        value = env[key]
        if not ENV_KEY_RE.match(str(key)):
            raise ReleaseError(f"{where}: env: {key!r} is not a valid environment variable name")
        if key == "DFLASH_ARGS":
            raise ReleaseError(f"{where}: env: DFLASH_ARGS is reserved for the rendered flags")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = str(value)
        if "\n" in value or "\r" in value or "\0" in value:
            raise ReleaseError(f"{where}: env.{key}: a value may not contain newlines or NUL")
        lines.append(f"{key}={_quote_env_value(value)}")
    joined = []
    for i, arg in enumerate(args or []):
        arg = str(arg)
        if arg == "" or any(c.isspace() for c in arg):
            raise ReleaseError(
                f"{where}: args[{i}] {arg!r}: empty or contains whitespace; systemd splits "
                "$DFLASH_ARGS at whitespace (write JSON flags compactly, without spaces)"
            )
        joined.append(arg)
    lines.append(f"DFLASH_ARGS={_quote_env_value(' '.join(joined))}")
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict:
    """Parse EnvironmentFile text the way systemd does for the subset render_env_file writes
    (comments, KEY=value, KEY="value" with \\-escapes, KEY='value')."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, _, rest = line.partition("=")
        key = key.strip()
        rest = rest.lstrip()
        if rest.startswith('"'):
            out, i = [], 1
            while i < len(rest) and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < len(rest):
                    i += 1
                out.append(rest[i])
                i += 1
            value = "".join(out)
        elif rest.startswith("'"):
            value = rest[1 : rest.index("'", 1)]
        else:
            value = rest.rstrip()
        env[key] = value
    return env


# ----------------------------------------------------------------------------- content


def instance_digest(venv_target: str | None, tree_target: str | None, env_text: str) -> str:
    return sha256_hex(canonical_json({"venv": venv_target, "tree": tree_target, "env": env_text}))


def build_content(layers, tree, flags, fingerprint, env_texts: dict, secret_names=None, carried=None) -> dict:
    """What a release runs, without time or toolkit revision: the content hash covers this.

    ``env_texts``: the env files as the digest sees them (secret values replaced by salted digests);
    ``secret_names``: {instance: [variables kept in the env file only]}; ``carried``: {instance:
    manifest entry} of instances kept from the current release (no longer in the inventory, removal
    not asked for)."""
    layers = list(layers or [])
    venv = layers[-1].get("path") if layers else None
    tree_path = (tree or {}).get("path") or (tree or {}).get("site_packages")
    instances = {}
    for name in sorted(flags or {}):
        f = flags[name] or {}
        env = {str(k): (MASK if is_secret_env(k) else v) for k, v in (f.get("env") or {}).items()}
        instances[name] = {
            "unit": f.get("unit") or f"dflash-{name}.service",
            "args": list(f.get("args") or []),
            "env": env,
            "applied": list(f.get("applied") or []),
            "skipped": list(f.get("skipped") or f.get("removed_cause") or []),
            "digest": instance_digest(venv, tree_path, env_texts[name]),
        }
        if (secret_names or {}).get(name):
            instances[name]["secrets"] = sorted(secret_names[name])
    for name, entry in sorted((carried or {}).items()):
        instances[name] = dict(entry, carried=True)
    return {
        "layers": [
            {k: layer.get(k) for k in ("name", "path", "hash", "parent", "python")} for layer in layers
        ],
        "venv": venv,
        "tree": tree_summary(tree),
        "tree_path": tree_path,
        "instances": instances,
        "fingerprint_digest": fingerprint_digest(fingerprint),
    }


def content_hash(content: dict) -> str:
    return sha256_hex(canonical_json(content))


def make_release_id(now: _dt.datetime, chash: str) -> str:
    now = now.astimezone(_dt.UTC) if now.tzinfo else now
    return f"{now:%Y%m%dT%H%M%S}-{chash[:8]}"


def build_manifest(content, release_id, sequence, created, revision, dirty, previous) -> dict:
    m = {
        "schema": SCHEMA,
        "id": release_id,
        "sequence": sequence,
        "created": created,
        "content_hash": content_hash(content),
        "toolkit": {"revision": revision, "dirty": bool(dirty)},
        "previous": previous,
    }
    m.update(content)
    return m


# ----------------------------------------------------------------------------- ordering


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
    return {"layers": sorted(layers), "trees": sorted(trees)}


def unreferenced_dirs(existing: list, referenced: list) -> list:
    """Entries of ``existing`` (absolute paths of dirs) that no kept release refers to; names
    starting with a dot (builds in progress) are never candidates."""
    ref = {os.path.normpath(p) for p in referenced}
    return sorted(
        p
        for p in existing
        if not os.path.basename(p).startswith(".") and os.path.normpath(p) not in ref
    )


def rollback_target(manifests, statuses: dict, current_id: str | None, rollback_to: str | None = None):
    """The release to go back to: ``rollback_to`` when given (must exist), else the newest
    release older than current (by sequence) whose smoke test did not fail."""
    by_id = {m["id"]: m for m in manifests}
    if rollback_to:
        if rollback_to not in by_id:
            known = ", ".join(m["id"] for m in order_releases(manifests)) or "none"
            raise ReleaseError(f"rollback_to={rollback_to}: no such release (known: {known})")
        return by_id[rollback_to]
    ordered = order_releases(manifests)
    if current_id in by_id:
        ordered = [m for m in ordered if order_key(m) < order_key(by_id[current_id])]
    candidates = [m for m in ordered if (statuses.get(m["id"]) or {}).get("status") != "failed"]
    if not candidates:
        raise ReleaseError(f"no release to go back to (current: {current_id or 'none'})")
    return candidates[-1]


def _args_diff(a: list, b: list) -> str:
    removed = [x for x in a if x not in b]
    added = [x for x in b if x not in a]
    return " ".join([f"-{x}" for x in removed] + [f"+{x}" for x in added]) or "reordered"


def diff_manifests(old: dict | None, new: dict) -> list:
    """Human-readable lines: what switching from ``old`` to ``new`` changes."""
    if not old:
        return [f"first release {new['id']}: {len(new.get('instances') or {})} instance(s)"]
    lines = []
    if old.get("venv") != new.get("venv"):
        lines.append(f"venv: {old.get('venv')} -> {new.get('venv')}")
    if old.get("tree_path") != new.get("tree_path"):
        lines.append(f"tree: {old.get('tree_path')} -> {new.get('tree_path')}")
    ot, nt = old.get("tree") or {}, new.get("tree") or {}
    if ot.get("sglang_version") != nt.get("sglang_version"):
        lines.append(f"sglang: {ot.get('sglang_version')} -> {nt.get('sglang_version')}")
    if old.get("fingerprint_digest") != new.get("fingerprint_digest"):
        lines.append("host fingerprint differs (driver/GPUs/toolkits)")
    oi, ni = old.get("instances") or {}, new.get("instances") or {}
    for name in sorted(set(oi) | set(ni)):
        if name not in ni:
            lines.append(f"instance {name}: not in {new['id']}")
        elif name not in oi:
            lines.append(f"instance {name}: new in {new['id']}")
        elif oi[name].get("digest") != ni[name].get("digest"):
            parts = []
            if oi[name].get("args") != ni[name].get("args"):
                parts.append("args " + _args_diff(oi[name].get("args") or [], ni[name].get("args") or []))
            if oi[name].get("env") != ni[name].get("env"):
                parts.append("env changed")
            lines.append(f"instance {name}: " + ("; ".join(parts) or "runtime (venv/tree) changed"))
    return lines


# ----------------------------------------------------------------------------- filesystem


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
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
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
    """Differences between a reused release directory and what it should hold."""
    path = os.path.join(releases_dir(prefix), manifest["id"])
    problems = []
    for name, text in env_texts.items():
        p = os.path.join(path, "instances", name + ".env")
        try:
            with open(p, encoding="utf-8") as fh:
                if fh.read() != text:
                    problems.append(f"{p}: content differs")
        except OSError:
            problems.append(f"{p}: missing")
    for link, target in (("venv", manifest.get("venv")), ("tree", manifest.get("tree_path"))):
        lp = os.path.join(path, link)
        if target and (not os.path.islink(lp) or os.readlink(lp) != target):
            problems.append(f"{lp}: should point at {target}")
    return problems


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def iso(now: _dt.datetime) -> str:
    return now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ----------------------------------------------------------------------------- operations


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


def prepare(prefix, layers, tree, flags, fingerprint, revision, dirty, host="host", check_mode=False, now=None,
            secrets=None, remove_absent=False, remove=(), unit_dir=None):
    """Find or create the release for these inputs.  Nothing is activated here.

    ``secrets``: {instance: {VAR: value}} written to the env file only. Instances of the current
    release that the inventory no longer has are carried over unchanged unless removal is asked for
    (``remove_absent``, ``remove``; see absent_plan).

    Returns {id, path, created (bool: a new directory), previous (current id or None),
    activate (bool: current does not point at it yet), changed_instances, manifest, repaired,
    carried, remove, swept}."""
    flags = flags or {}
    secrets = secrets or {}
    swept = [] if check_mode else sweep_staging(prefix)
    unwritable = [] if check_mode else drop_world_write(prefix)
    salt = load_salt(prefix, create=not check_mode) if secrets else b""
    env_texts, digest_texts = {}, {}
    for name in sorted(flags):
        if not INSTANCE_NAME_RE.match(name):
            raise ReleaseError(f"{host}: instance {name!r}: name must match {INSTANCE_NAME_RE.pattern}")
        f = flags[name] or {}
        where = f"{host}: instance {name}"
        sec = {str(k): str(v) for k, v in (secrets.get(name) or {}).items()}
        env = dict(f.get("env") or {})
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
                            {n: list(secrets.get(n) or {}) for n in flags}, carried)
    chash = content_hash(content)
    reuse = find_reusable(manifests, chash)
    result = {"previous": cur if cur_manifest else None, "problems": problems, "repaired": [],
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
        result["repaired"] = fix
    else:
        now = now or utc_now()
        rid = make_release_id(now, chash)
        manifest = build_manifest(
            content, rid, next_sequence(manifests), iso(now), revision, dirty, result["previous"]
        )
        result["created"] = True
        if not check_mode:
            write_release(prefix, manifest, env_texts)
    if cur == rid:
        result["previous"] = manifest.get("previous")
    result.update(
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
    return {"changed": True, "previous": before, "current": release_id}


def deactivate(prefix: str, check_mode=False) -> dict:
    """Remove the current link (a first deploy that failed has nothing to go back to)."""
    link = os.path.join(prefix, "current")
    before = current_id(prefix)
    if before is None:
        return {"changed": False, "previous": None, "current": None}
    if not check_mode:
        os.unlink(link)
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


def plan_rollback(prefix: str, rollback_to: str | None = None) -> dict:
    manifests, problems = load_releases(prefix)
    by_id = {m["id"]: m for m in manifests}
    cur = current_id(prefix)
    statuses = load_statuses(prefix, list(by_id))
    target = rollback_target(manifests, statuses, cur, rollback_to)
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
    """Delete releases beyond the newest ``keep`` (never current nor ``protect``), then report
    which layer / tree paths the kept releases still use and which tree dirs are unused."""
    manifests, problems = load_releases(prefix)
    cur = current_id(prefix)
    keep_ids, remove_ids = plan_prune(manifests, keep, tuple(protect) + (cur,))
    if not check_mode:
        for rid in remove_ids:
            shutil.rmtree(os.path.join(releases_dir(prefix), rid))
    kept = [m for m in manifests if m["id"] in keep_ids]
    refs = referenced_paths(kept)
    trees_root = os.path.join(prefix, "trees")
    existing_trees = (
        [os.path.join(trees_root, n) for n in os.listdir(trees_root) if os.path.isdir(os.path.join(trees_root, n))]
        if os.path.isdir(trees_root)
        else []
    )
    # a tree path may name a site-packages dir inside <prefix>/trees/<name>/: keep its top dir
    ref_tree_tops = set()
    for t in refs["trees"]:
        rel = os.path.relpath(os.path.normpath(t), trees_root)
        if not rel.startswith(".."):
            ref_tree_tops.add(os.path.join(trees_root, rel.split(os.sep)[0]))
    unused_trees = unreferenced_dirs(existing_trees, sorted(ref_tree_tops))
    if not check_mode:
        for t in unused_trees:
            shutil.rmtree(t)
    return {
        "changed": bool(remove_ids or unused_trees),
        "kept": keep_ids,
        "removed": remove_ids,
        "referenced_layers": refs["layers"],
        "referenced_trees": refs["trees"],
        "removed_trees": unused_trees,
        "problems": problems,
    }
