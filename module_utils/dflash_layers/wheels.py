"""Wheels: filename tags, the tags a host accepts, the best wheel of a pylock entry, sha256.

Pure logic with no Ansible import (used on the controller by the wheelhouse and on hosts by the
layer builder; pytest imports it directly).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import zipfile
from urllib.parse import unquote

from ansible.module_utils.dflash_layers.pep508 import canonical_name


class LayerError(Exception):
    """A layer could not be validated, resolved or built; the message names layer and field."""


def manylinux_platforms(arch, glibc):
    """Platform tags a host with this glibc accepts, most specific first."""
    try:
        major, minor = (int(x) for x in str(glibc).split(".")[:2])
    except ValueError:
        major, minor = 2, 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    old_arches = ("x86_64", "i686")
    out = []
    if major == 2:
        for m in range(minor, 4, -1):
            out.append(f"manylinux_2_{m}_{arch}")
            if m in legacy and (m == 17 or arch in old_arches):
                out.append(f"{legacy[m]}_{arch}")
    out.append(f"linux_{arch}")
    return out


def wheel_tags(filename):
    """Set of (interpreter, abi, platform) tags of a wheel filename."""
    stem = filename.removesuffix(".whl")
    parts = stem.split("-")
    if len(parts) < 5:
        raise ValueError(f"{filename!r} is not a wheel filename")
    pyt, abit, plat = parts[-3], parts[-2], parts[-1]
    return {(i, a, p) for i in pyt.split(".") for a in abit.split(".") for p in plat.split(".")}


def supported_tags(python_version, arch, glibc, implementation="cp"):
    """Ordered list of tags (best first) for a CPython host, without consulting this interpreter."""
    major, minor = (int(x) for x in str(python_version).split(".")[:2])
    plats = manylinux_platforms(arch, glibc)
    cp = f"{implementation}{major}{minor}"
    tags = []
    for plat in plats:
        tags.append((cp, cp, plat))
    for plat in plats:
        tags.append((cp, "abi3", plat))
        for m in range(minor - 1, 1, -1):
            tags.append((f"{implementation}{major}{m}", "abi3", plat))
    for plat in plats:
        tags.append((cp, "none", plat))
    for plat in plats:
        for m in range(minor, -1, -1):
            tags.append((f"py{major}{m}", "none", plat))
        tags.append((f"py{major}", "none", plat))
    tags.append((cp, "none", "any"))
    for m in range(minor, -1, -1):
        tags.append((f"py{major}{m}", "none", "any"))
    tags.append((f"py{major}", "none", "any"))
    return tags


def select_wheel(wheels, tags):
    """Pick the best wheel (dict with ``url``) for the ordered tag list; None when none fits."""
    rank = {t: i for i, t in enumerate(tags)}
    best = None
    for wheel in wheels:
        filename = wheel.get("name") or unquote(wheel["url"].rsplit("/", 1)[-1].split("#")[0])
        try:
            score = min((rank[t] for t in wheel_tags(filename) if t in rank), default=None)
        except ValueError:
            continue
        if score is not None and (best is None or score < best[0]):
            best = (score, filename, wheel)
    if best is None:
        return None
    return best[1], best[2]


def wheel_entry(pkg, tags, skip_url_prefix=None):
    """The lock entry {name, version, filename, url, sha256, size} of one pylock.toml package: its
    best wheel for the ordered tags (wheels whose url starts with ``skip_url_prefix`` are not
    candidates). Raises LayerError naming the package when no wheel fits or it has no sha256."""
    wheels = [w for w in pkg.get("wheels") or []
              if not (skip_url_prefix and str(w.get("url", "")).startswith(skip_url_prefix))]
    chosen = select_wheel(wheels, tags)
    what = f"{pkg.get('name')}=={pkg.get('version')}"
    if chosen is None:
        raise LayerError(f"{what}: no wheel for the host's platform/python")
    filename, wheel = chosen
    sha = (wheel.get("hashes") or {}).get("sha256")
    if not sha:
        raise LayerError(f"{what}: no sha256 in the lock")
    return {"name": canonical_name(pkg["name"]), "version": str(pkg.get("version")), "filename": filename,
            "url": wheel["url"], "sha256": sha, "size": wheel.get("size")}


def target_from_interpreter(interp):
    """Wheel target of a host interpreter (inspect_interpreter's facts)."""
    libc = interp.get("libc") or ["", ""]
    glibc = libc[1] if len(libc) > 1 and libc[0] == "glibc" and libc[1] else "2.17"
    impl = {"cpython": "cp", "pypy": "pp"}.get(interp.get("implementation"), "cp")
    return {"python_version": ".".join(str(interp["version"]).split(".")[:2]), "arch": interp["machine"],
            "glibc": glibc, "implementation": impl}


def sha256_file(path, bufsize=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(bufsize), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_wheel(directory, name, version, files=None, requires=(), requires_python=None, provides_extra=(),
                generator="dflash-deploy"):
    """Write a real, installable ``py3-none-any`` wheel (fixed timestamps: the same inputs give the
    same bytes) holding ``files`` ({path in the wheel: str or bytes}) and a METADATA with the given
    requirements. Returns its filename."""
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    if requires_python:
        meta.append(f"Requires-Python: {requires_python}")
    meta += [f"Provides-Extra: {e}" for e in provides_extra]
    meta += [f"Requires-Dist: {r}" for r in requires]
    content = {path: data.encode() if isinstance(data, str) else data for path, data in (files or {}).items()}
    content[f"{stem}.dist-info/METADATA"] = ("\n".join(meta) + "\n").encode()
    content[f"{stem}.dist-info/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: {generator}\n"
                                         "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()
    record = []
    for path, data in content.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{stem}.dist-info/RECORD,,")
    content[f"{stem}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in content.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
    return filename
