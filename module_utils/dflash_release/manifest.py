"""A release's identity: content-derived ids, the manifest, the fingerprint digest, manifest diffs.

The id is ``<UTC yyyymmddThhmmss>-<content hash8>``; an unchanged re-run finds the newest release with the
same content hash and reuses it (no new directory, no change).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re

from ansible.module_utils.dflash_common.secrets import MASK, is_secret_env

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


def instance_digest(venv_target: str | None, tree_target: str | None, env_text: str) -> str:
    return sha256_hex(canonical_json({"venv": venv_target, "tree": tree_target, "env": env_text}))


def runtime_of(flags_entry: dict, venv, tree_path) -> tuple:
    """(venv, tree path) an instance runs: its sglang version's (the flags stage's ``venv`` / ``tree_path``), else the
    release's (the host's own version)."""
    f = flags_entry or {}
    return f.get("venv") or venv, f.get("tree_path") or tree_path


def instance_python_env(flags_entry: dict, venv) -> dict:
    """``{DFLASH_PYTHON: <its venv>/bin/python}`` for an instance whose sglang version's venv is not the release's
    (the unit starts the release's venv/bin/python; dflash-launch then runs this one), else {}."""
    own, _tree = runtime_of(flags_entry, venv, None)
    return {"DFLASH_PYTHON": own.rstrip("/") + "/bin/python"} if own and venv and own != venv else {}


def build_content(layers, tree, flags, fingerprint, env_texts: dict, secret_names=None, carried=None,
                  extra_layers=None) -> dict:
    """What a release runs, without time or toolkit revision: the content hash covers this.

    ``env_texts``: the env files as the digest sees them (secret values replaced by salted digests);
    ``secret_names``: {instance: [variables kept in the env file only]}; ``carried``: {instance:
    manifest entry} of instances kept from the current release (no longer in the inventory, removal
    not asked for). ``extra_layers``: the layers of the other sglang versions the instances run (listed with
    the release's, so that pruning keeps them). Each instance records its sglang version, venv and tree."""
    layers = list(layers or [])
    venv = layers[-1].get("path") if layers else None
    tree_path = (tree or {}).get("path") or (tree or {}).get("site_packages")
    instances = {}
    for name in sorted(flags or {}):
        f = flags[name] or {}
        own_venv, own_tree = runtime_of(f, venv, tree_path)
        env = {str(k): (MASK if is_secret_env(k) else v) for k, v in (f.get("env") or {}).items()}
        instances[name] = {
            "unit": f.get("unit") or f"dflash-{name}.service",
            "port": f.get("port"),
            "base_url": f.get("base_url"),
            "args": list(f.get("args") or []),
            "env": env,
            "applied": list(f.get("applied") or []),
            "skipped": list(f.get("skipped") or f.get("removed_cause") or []),
            "digest": instance_digest(own_venv, own_tree, env_texts[name]),
        }
        if f.get("sglang_version"):
            instances[name].update(sglang_version=f["sglang_version"], venv=own_venv, tree_path=own_tree)
        if (secret_names or {}).get(name):
            instances[name]["secrets"] = sorted(secret_names[name])
    for name, entry in sorted((carried or {}).items()):
        instances[name] = dict(entry, carried=True)
    listed, seen = [], set()
    for layer in layers + list(extra_layers or []):
        if layer.get("path") not in seen:
            seen.add(layer.get("path"))
            listed.append({k: layer.get(k) for k in ("name", "path", "hash", "parent", "python")})
    return {
        "layers": listed,
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
            if oi[name].get("sglang_version") != ni[name].get("sglang_version"):
                parts.append(f"sglang {oi[name].get('sglang_version') or '?'} -> {ni[name].get('sglang_version') or '?'}")
            if oi[name].get("args") != ni[name].get("args"):
                parts.append("args " + _args_diff(oi[name].get("args") or [], ni[name].get("args") or []))
            if oi[name].get("env") != ni[name].get("env"):
                parts.append("env changed")
            lines.append(f"instance {name}: " + ("; ".join(parts) or "runtime (venv/tree) changed"))
    return lines
