"""The controller's offline wheelhouse: each layer resolved once for its host, locked, downloaded.

Pure logic with no Ansible import (library/dflash_wheelhouse.py wraps it). Layers are resolved in
order, parents first, each with what its parent provides offered to the resolver
(module_utils/dflash_layers/overlay.py): an existing venv's distributions as the host reported them, a
built parent's from its locked wheels. A lock (``<dir>/locks/<layer>-<key12>.json``) lists the
layer's whole closure, each member with its source: ``parent`` (taken from the parent at that exact
version) or ``layer`` (a wheel: filename, url, sha256, size, downloaded into ``<dir>/files/``).
Its key covers the spec, the host's target and the parent's freeze, so a changed parent resolves
again. Only the ``layer`` wheels are pushed and installed.
"""

from __future__ import annotations

import contextlib
import email.parser
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import zipfile

from ansible.module_utils.dflash_layers.build import FORMAT, default_runner, sha256_json
from ansible.module_utils.dflash_layers.overlay import freeze, resolve, uv_options_canonical
from ansible.module_utils.dflash_layers.pep508 import canonical_name
from ansible.module_utils.dflash_layers.wheels import LayerError, sha256_file


def wheelhouse_key(spec, target, parent_freeze=None):
    """Key of a layer's lock: its resolution inputs, the host target and the parent's freeze."""
    resolve_on = {k: spec.get(k) for k in ("requirements", "no_deps", "exclude")}
    resolve_on.update(uv_options_canonical(spec))
    return sha256_json({"format": FORMAT, "resolve": resolve_on, "target": target,
                        "parent": sorted(parent_freeze) if parent_freeze else []})


def wheel_distribution(path):
    """What an installed wheel provides, from its METADATA: {name, key, version, requires,
    requires_python, provides_extra} (the form overlay.describe returns)."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise LayerError(f"{path}: no *.dist-info/METADATA in the wheel")
        meta = email.parser.Parser().parsestr(zf.read(names[0]).decode("utf-8", "replace"), headersonly=True)
    return {"name": meta["Name"], "key": canonical_name(meta["Name"]), "version": meta["Version"],
            "requires": meta.get_all("Requires-Dist") or [], "requires_python": meta.get("Requires-Python"),
            "provides_extra": meta.get_all("Provides-Extra") or [], "location": None}


def download_url(url, dest, timeout=600):
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as resp, open(dest, "wb") as out:
        shutil.copyfileobj(resp, out, 1 << 20)


def _fetch_verified(entry, files_dir, fetch, check_mode, result):
    dest = os.path.join(files_dir, entry["filename"])
    if os.path.exists(dest):
        if sha256_file(dest) == entry["sha256"]:
            return
        result["redownloaded"].append(entry["filename"])
    if check_mode:
        result["downloaded"].append(entry["filename"])
        return
    part = f"{dest}.part-{secrets.token_hex(4)}"
    try:
        fetch(entry["url"], part)
        got = sha256_file(part)
        if got != entry["sha256"]:
            raise LayerError(f"{entry['filename']}: sha256 {got} does not match the lock's "
                             f"{entry['sha256']} ({entry['url']})")
        os.rename(part, dest)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    result["downloaded"].append(entry["filename"])
    result["bytes"] += os.path.getsize(dest)


def _lock_layer(directory, spec, target, parent_dists, uv_command, runner, check_mode, result):
    """The layer's lock entries (resolved now, or read from the cache), or None in check mode when
    it would have to be resolved."""
    key = wheelhouse_key(spec, target, freeze(parent_dists))
    lock_path = os.path.join(directory, "locks", f"{spec['name']}-{key[:12]}.json")
    result["lock_files"][spec["name"]] = lock_path
    if os.path.exists(lock_path):
        with open(lock_path, encoding="utf-8") as fh:
            return json.load(fh)["packages"]
    result["resolved"].append(spec["name"])
    if check_mode:
        return None
    work = os.path.join(directory, f".resolve-{spec['name']}-{secrets.token_hex(4)}")
    try:
        res = resolve(spec, parent_dists, uv_command, runner, work, target=target, fmt="pylock")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(lock_path + ".part", "w", encoding="utf-8") as fh:
        json.dump({"format": FORMAT, "layer": spec["name"], "key": key, "target": target,
                   "requirements": spec["requirements"], "exclude": spec.get("exclude") or [],
                   "parent": spec.get("parent"), "parent_freeze": freeze(parent_dists),
                   "held_back": res["held_back"], "standins_skipped": res["standins_skipped"],
                   "packages": res["closure"]}, fh, indent=1, sort_keys=True)
    os.rename(lock_path + ".part", lock_path)
    return res["closure"]


def ensure_wheelhouse(directory, specs, targets, parent_dists=None, uv_command=("uv",), runner=default_runner,
                      fetch=None, check_mode=False):
    """Controller side: lock every layer of one host once and fetch the wheels it installs.

    specs: normalised layer specs, parents first. targets: {layer name: {python_version, arch,
    glibc, implementation}} (existing layers need none). parent_dists: {existing layer name: its
    distributions as the host described them}. A corrupt cached wheel is downloaded again.
    Returns {"locks": {layer: closure entries}, "downloaded", "resolved", "redownloaded",
    "lock_files", "changed", "bytes"}."""
    fetch = fetch or download_url
    files_dir = os.path.join(directory, "files")
    result = {"locks": {}, "downloaded": [], "resolved": [], "redownloaded": [], "bytes": 0, "lock_files": {}}
    if not check_mode:
        os.makedirs(files_dir, exist_ok=True)
        os.makedirs(os.path.join(directory, "locks"), exist_ok=True)
    provides = {}  # layer name -> {key: distribution} it makes visible to a child
    with contextlib.ExitStack() as stack:
        if not check_mode:
            lock_fh = stack.enter_context(open(os.path.join(directory, ".lock"), "a", encoding="utf-8"))
            fcntl.flock(lock_fh, fcntl.LOCK_EX)
        for spec in specs:
            name = spec["name"]
            parent = dict(provides.get(spec.get("parent"), {})) if spec.get("parent") else {}
            if spec.get("existing_path"):
                provides[name] = {d["key"]: d for d in (parent_dists or {}).get(name, [])}
                continue
            provides[name] = parent
            if not spec["requirements"]:
                continue
            entries = _lock_layer(directory, spec, targets[name], sorted(parent.values(), key=lambda d: d["key"]),
                                  uv_command, runner, check_mode, result)
            if entries is None:
                continue
            result["locks"][name] = entries
            own = {}
            for entry in entries:
                if entry.get("source", "layer") != "layer":
                    continue
                _fetch_verified(entry, files_dir, fetch, check_mode, result)
                path = os.path.join(files_dir, entry["filename"])
                if os.path.exists(path):
                    dist = wheel_distribution(path)
                    own[dist["key"]] = dist
            provides[name] = {**parent, **own}
    result["changed"] = bool(result["downloaded"] or result["resolved"])
    return result


def extract_uv_binary(wheel_path, dest):
    """Write the ``uv`` executable found in a uv wheel to dest (mode 0755). Returns True when written
    (False when dest already holds the same bytes)."""
    import zipfile

    with zipfile.ZipFile(wheel_path) as zf:
        names = [n for n in zf.namelist() if n.endswith(".data/scripts/uv")]
        if not names:
            raise LayerError(f"{wheel_path}: no uv binary (*.data/scripts/uv) in the wheel")
        data = zf.read(names[0])
    if os.path.exists(dest):
        with open(dest, "rb") as fh:
            if hashlib.sha256(fh.read()).digest() == hashlib.sha256(data).digest():
                return False
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    part = f"{dest}.part-{secrets.token_hex(4)}"
    with open(part, "wb") as fh:
        fh.write(data)
    os.chmod(part, 0o755)
    os.rename(part, dest)
    return True


def missing_wheels(wheelhouse, wheels):
    """Filenames of ``wheels`` ([{filename, sha256}]) that ``wheelhouse`` lacks or holds with another
    sha256 (what must be pushed). Reads only."""
    out = []
    for w in sorted({w["filename"]: w for w in wheels}.values(), key=lambda w: w["filename"]):
        path = os.path.join(wheelhouse, w["filename"])
        if not os.path.isfile(path) or sha256_file(path) != w["sha256"]:
            out.append(w["filename"])
    return out


def bundle_wheels(files_dir, filenames, bundle_dir):
    """One uncompressed tar of the given wheels (wheels are zips already) for a single push;
    named by the content so a repeated push reuses it. Returns its path."""
    import tarfile

    names = sorted(set(filenames))
    key = sha256_json([[n, os.path.getsize(os.path.join(files_dir, n))] for n in names])[:16]
    dest = os.path.join(bundle_dir, f"push-{key}.tar")
    if os.path.exists(dest):
        return dest
    os.makedirs(bundle_dir, exist_ok=True)
    part = f"{dest}.part-{secrets.token_hex(4)}"
    with tarfile.open(part, "w") as tar:
        for n in names:
            tar.add(os.path.join(files_dir, n), arcname=n)
    os.rename(part, dest)
    return dest
