"""The content-addressed model store: ``<prefix>/models/<name>-<digest12>/`` on a host.

A model folder's identity is its manifest, every file's relative path, size and sha256; its digest is the
sha256 of that manifest (canonical JSON). The same bytes from the hub, a URL or the controller land in one
directory; a second instance, or a second deploy, finds it by its marker (``.dflash-model.json``: the
manifest, the digest, the source) and copies nothing. A copy is made in ``.incoming-<digest>/``, every file
checked against the manifest (size, sha256) and only then renamed into place.

stdlib only: the host side runs inside the dflash_models module. No Ansible import.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil

MARKER = ".dflash-model.json"
INCOMING = ".incoming-"
CHUNK = 8 * 1024 * 1024
# files of a hub snapshot or an unpacked archive that are not the model's
SKIP_NAMES = {MARKER, ".gitattributes"}
SKIP_DIRS = {".cache", ".git", ".huggingface"}


def sha256_file(path, progress=None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK)
            if not block:
                return h.hexdigest()
            h.update(block)
            if progress:
                progress(len(block))


def git_blob_sha1(path) -> str:
    """The hub's id of a file kept in git (not LFS): sha1 of 'blob <size>\\0' + its bytes."""
    h = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def model_files(root) -> list[str]:
    """Relative paths of a model folder's files (symlinks followed: a hub snapshot links into its blobs)."""
    out = []
    for dirpath, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel = os.path.relpath(dirpath, root)
        for f in sorted(files):
            if f in SKIP_NAMES or f.startswith(INCOMING):
                continue
            out.append(f if rel == "." else os.path.join(rel, f))
    return sorted(out)


class HashCache:
    """sha256 of files already hashed, keyed by (path, size, mtime_ns, inode), in one JSON file guarded by a
    lock: a second host of the same run (another fork) or a later run does not read 50 GB again."""

    def __init__(self, path):
        self.path = path

    def _key(self, path, st):
        return f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"

    def _locked(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fh = open(f"{self.path}.lock", "a+")  # noqa: SIM115 - closed in get_many
        fcntl.flock(fh, fcntl.LOCK_EX)
        return fh

    def get_many(self, root, rels, progress=None) -> dict:
        """{rel: sha256} for every file; hashes only what the cache does not hold."""
        lock = self._locked()
        try:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    cache = json.load(fh)
            except (OSError, ValueError):
                cache = {}
            out, dirty = {}, False
            for rel in rels:
                full = os.path.join(root, rel)
                st = os.stat(full)
                key = self._key(full, st)
                if key not in cache:
                    cache[key] = sha256_file(full, progress)
                    dirty = True
                elif progress:
                    progress(st.st_size)
                out[rel] = cache[key]
            if dirty:
                tmp = f"{self.path}.tmp-{os.getpid()}"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(cache, fh)
                os.replace(tmp, self.path)
            return out
        finally:
            lock.close()


def manifest_of(root, hashes=None, progress=None, cache=None) -> list[dict]:
    """[{path, size, sha256}] of a model folder, sorted by path."""
    rels = model_files(root)
    if hashes is None:
        hashes = cache.get_many(root, rels, progress) if cache else {
            r: sha256_file(os.path.join(root, r), progress) for r in rels}
    return [{"path": r, "size": os.path.getsize(os.path.join(root, r)), "sha256": hashes[r]} for r in rels]


def digest(manifest) -> str:
    canon = json.dumps([[f["path"], int(f["size"]), f["sha256"]] for f in manifest], separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def store_dirname(name, dig) -> str:
    return f"{name}-{dig[:12]}"


def read_marker(path) -> dict | None:
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def stored(path, dig) -> bool:
    """The store directory holds this digest, complete (marker written last, sizes as in the manifest)."""
    marker = read_marker(path)
    if not marker or marker.get("digest") != dig:
        return False
    for f in marker.get("files") or []:
        try:
            if os.path.getsize(os.path.join(path, f["path"])) != int(f["size"]):
                return False
        except OSError:
            return False
    return True


def check_files(root, manifest, progress=None) -> list[str]:
    """What in ``root`` does not match the manifest (missing, size, sha256), in words."""
    problems = []
    for f in manifest:
        full = os.path.join(root, f["path"])
        try:
            size = os.path.getsize(full)
        except OSError:
            problems.append(f"{f['path']}: missing")
            continue
        if size != int(f["size"]):
            problems.append(f"{f['path']}: {size} bytes, expected {f['size']}")
            continue
        got = sha256_file(full, progress)
        if got != f["sha256"]:
            problems.append(f"{f['path']}: sha256 {got[:16]}..., expected {f['sha256'][:16]}...")
    return problems


def commit(store_root, name, dig, manifest, source, mode_dir=0o755, mode_file=0o644, progress=None) -> dict:
    """Turn ``<store_root>/.incoming-<digest>/`` (the pushed files, at their relative paths) into
    ``<store_root>/<name>-<digest12>/``: check every file, write the marker, rename. -> {path, problems}."""
    incoming = os.path.join(store_root, INCOMING + dig)
    final = os.path.join(store_root, store_dirname(name, dig))
    if stored(final, dig):
        shutil.rmtree(incoming, ignore_errors=True)
        return {"path": final, "problems": []}
    problems = check_files(incoming, manifest, progress)
    if problems:
        return {"path": final, "problems": problems}
    for dirpath, dirs, files in os.walk(incoming):
        os.chmod(dirpath, mode_dir)
        for f in files:
            os.chmod(os.path.join(dirpath, f), mode_file)
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), mode_dir)
    if os.geteuid() == 0:
        for dirpath, dirs, files in os.walk(incoming):
            os.chown(dirpath, 0, 0)
            for f in files:
                os.chown(os.path.join(dirpath, f), 0, 0)
    marker = {"digest": dig, "name": name, "files": manifest, "source": source}
    with open(os.path.join(incoming, MARKER), "w", encoding="utf-8") as fh:
        json.dump(marker, fh, indent=1)
    os.chmod(os.path.join(incoming, MARKER), mode_file)
    if os.path.lexists(final):  # an incomplete copy under the final name (an older run): replaced
        shutil.rmtree(final)
    os.rename(incoming, final)
    return {"path": final, "problems": []}
