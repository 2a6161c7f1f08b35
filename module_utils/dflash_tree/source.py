"""A user's own sglang checkout as a tree's source (``dflash_tree_src``): packed, hashed, planned."""

from __future__ import annotations

import os
import re
import tarfile
import tempfile

from ansible.module_utils.dflash_tree.common import (
    MANIFEST_FORMAT,
    PACKAGE,
    TMP_PREFIX,
    TreeError,
    sha256_bytes,
    sha256_file,
)
from ansible.module_utils.dflash_tree.wheel import files_listing, tree_hash_for_src, tree_name


def _walk_files(root):
    """Relative paths of the regular files under root/sglang, skipping caches and VCS dirs."""
    base = os.path.join(root, PACKAGE)
    if not os.path.isdir(base):
        raise TreeError(f"{root} has no {PACKAGE}/ package directory")
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".git"))
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return out


def src_package_root(src):
    """A checkout may be the repository (python/sglang) or a directory that holds sglang/ directly."""
    for cand in (src, os.path.join(src, "python")):
        if os.path.isfile(os.path.join(cand, PACKAGE, "__init__.py")):
            return cand
    raise TreeError(f"dflash_tree_src {src}: neither {PACKAGE}/ nor python/{PACKAGE}/ holds a package")


_VERSION_RE = re.compile(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""")


def version_from_source(text):
    m = _VERSION_RE.search(text)
    return m.group(1) if m else None


def read_version(root):
    """sglang's version from _version.py / version.py without importing it."""
    for fn in ("_version.py", "version.py"):
        path = os.path.join(root, PACKAGE, fn)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                version = version_from_source(f.read())
            if version:
                return version
    return "unknown"


def pack_src(src, out_dir):
    """Controller side: pack a user's checkout into a deterministic tarball named by its content.

    Returns ``{archive, content_sha256, sglang_version, file_count, changed}``.
    """
    root = src_package_root(os.path.abspath(src))
    rels = _walk_files(root)
    hashes = {}
    for rel in rels:
        hashes[rel] = sha256_file(os.path.join(root, rel))
    content_sha = sha256_bytes(files_listing(hashes))
    version = read_version(root)
    os.makedirs(out_dir, exist_ok=True)
    archive = os.path.join(out_dir, f"sglang-src-{content_sha[:16]}.tar")
    changed = False
    if not os.path.isfile(archive):
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=out_dir)
        os.close(fd)
        try:
            with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
                for rel in rels:
                    full = os.path.join(root, rel)
                    info = tar.gettarinfo(full, arcname=rel)
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    info.mode = 0o755 if os.stat(full).st_mode & 0o111 else 0o644
                    with open(full, "rb") as f:
                        tar.addfile(info, f)
            os.replace(tmp, archive)
            changed = True
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return {
        "archive": archive,
        "manifest": src_manifest(hashes, version, root),
        "content_sha256": content_sha,
        "sglang_version": version,
        "file_count": len(rels),
        "src": root,
        "changed": changed,
    }


def src_manifest(file_hashes, version, src_label=None):
    """The manifest of a tree shipped from a user's checkout."""
    content_sha256 = sha256_bytes(files_listing(file_hashes))
    thash = tree_hash_for_src(content_sha256)
    return {
        "format": MANIFEST_FORMAT,
        "name": tree_name(version, thash),
        "hash": thash,
        "source": "src",
        "sglang_version": version,
        "wheel": None,
        "src": {"path": src_label, "content_sha256": content_sha256},
        "patches": [],
        # a user's checkout: every file is recorded, since any of them may carry their changes
        "files": {p: {"sha256": file_hashes[p], "pristine_sha256": None} for p in sorted(file_hashes)},
        "file_count": len(file_hashes),
        "tree_sha256": content_sha256,
    }


def plan_src_archive(archive, content_sha256, src_label=None):
    """Host side: read a packed checkout into memory and check it against its content hash."""
    contents = {}
    modes = {}
    with tarfile.open(archive, "r") as tar:
        for info in tar:
            if not info.isfile():
                raise TreeError(f"{archive}: {info.name} is not a regular file")
            name = info.name
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or parts[0] != PACKAGE:
                raise TreeError(f"{archive}: unexpected member {name}")
            contents[name] = tar.extractfile(info).read()
            modes[name] = 0o755 if info.mode & 0o111 else 0o644
    file_hashes = {p: sha256_bytes(d) for p, d in contents.items()}
    actual = sha256_bytes(files_listing(file_hashes))
    if actual != content_sha256:
        raise TreeError(f"{archive}: content sha256 {actual}, expected {content_sha256}")
    version = "unknown"
    for fn in ("sglang/_version.py", "sglang/version.py"):
        found = version_from_source(contents[fn].decode("utf-8", "replace")) if fn in contents else None
        if found:
            version = found
            break
    manifest = src_manifest(file_hashes, version, src_label)
    return {
        "manifest": manifest,
        "wheel": None,
        "contents": contents,
        "file_hashes": file_hashes,
        "modes": modes,
    }
