"""The pinned sglang wheel as a tree's source: its files, the tree's hash and name, the build plan."""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import zipfile

from ansible.module_utils.dflash_tree.common import (
    MANIFEST_FORMAT,
    PACKAGE,
    TREE_PREFIX,
    TreeError,
    record_hash_to_hex,
    sha256_bytes,
    sha256_file,
)
from ansible.module_utils.dflash_tree.diff import apply_series


class Wheel:
    """The pinned sglang wheel: checked against its pinned sha256 and against its own RECORD."""

    def __init__(self, path, expected_sha256=None):
        if not os.path.isfile(path):
            raise TreeError(f"wheel {path} does not exist")
        self.path = path
        self.name = os.path.basename(path)
        self.sha256 = sha256_file(path)
        if expected_sha256 and self.sha256 != expected_sha256.lower():
            raise TreeError(
                f"wheel {path} has sha256 {self.sha256}, pinned {expected_sha256}: refusing to use it"
            )
        m = re.match(r"^([A-Za-z0-9_.]+)-([^-]+)-", self.name)
        if not m or m.group(1).lower() != PACKAGE:
            raise TreeError(f"{self.name} is not an sglang wheel file name")
        self.version = m.group(2)
        self.zip = zipfile.ZipFile(path)
        record_name = f"{m.group(1)}-{self.version}.dist-info/RECORD"
        try:
            record = self.zip.read(record_name).decode("utf-8")
        except KeyError:
            raise TreeError(f"{self.name} has no {record_name}") from None
        self.record = {}
        for fields in csv.reader(io.StringIO(record)):
            if len(fields) == 3 and fields[1]:
                self.record[fields[0]] = record_hash_to_hex(fields[1])
        self.members = {
            info.filename: info
            for info in self.zip.infolist()
            if info.filename.startswith(PACKAGE + "/") and not info.is_dir()
        }
        missing = [p for p in self.members if p not in self.record]
        if missing:
            raise TreeError(
                "{}: files not in its RECORD: {}".format(self.name, ", ".join(sorted(missing)[:5]))
            )

    def read(self, relpath):
        info = self.members.get(relpath)
        if info is None:
            return None
        data = self.zip.read(info)
        if sha256_bytes(data) != self.record[relpath]:
            raise TreeError(f"{self.name}: {relpath} does not match the wheel's RECORD")
        return data

    def mode(self, relpath):
        perm = (self.members[relpath].external_attr >> 16) & 0o777
        return 0o755 if perm & 0o111 else 0o644

    def close(self):
        self.zip.close()


def tree_hash_for_wheel(wheel_sha256, patches):
    h = hashlib.sha256()
    h.update(b"dflash-tree/1\nwheel %s\n" % wheel_sha256.encode())
    for p in patches:
        h.update(b"patch %s %s\n" % (p["name"].encode(), p["sha256"].encode()))
    return h.hexdigest()


def tree_hash_for_src(content_sha256):
    return hashlib.sha256(b"dflash-tree/1\nsrc %s\n" % content_sha256.encode()).hexdigest()


def tree_name(version, tree_hash):
    return f"{TREE_PREFIX}{version}-{tree_hash[:12]}"


def files_listing(file_hashes):
    """``sha256sum`` format, sorted by path; its sha256 is the tree digest."""
    return "".join(f"{file_hashes[p]}  {p}\n" for p in sorted(file_hashes)).encode()


def plan_wheel(wheel_path, wheel_sha256, patches):
    """Check the wheel and dry-run the whole series in memory. Nothing is written.

    Returns the plan: everything the tree will contain and the manifest that describes it.
    """
    wheel = Wheel(wheel_path, wheel_sha256)
    try:
        contents, pristine, touched_by = apply_series(wheel.read, patches)
        file_hashes = {p: wheel.record[p] for p in wheel.members}
        modes = {p: wheel.mode(p) for p in wheel.members}
        for path, data in contents.items():
            if data is None:
                file_hashes.pop(path, None)
                modes.pop(path, None)
            else:
                file_hashes[path] = sha256_bytes(data)
                modes.setdefault(path, 0o644)
        thash = tree_hash_for_wheel(wheel.sha256, patches)
        manifest = {
            "format": MANIFEST_FORMAT,
            "name": tree_name(wheel.version, thash),
            "hash": thash,
            "source": "wheel",
            "sglang_version": wheel.version,
            "wheel": {"name": wheel.name, "sha256": wheel.sha256},
            "src": None,
            "patches": [
                {
                    "name": p["name"],
                    "sha256": p["sha256"],
                    "files": sorted(f for f, names in touched_by.items() if p["name"] in names),
                }
                for p in patches
            ],
            "files": {
                path: {"sha256": file_hashes.get(path), "pristine_sha256": pristine[path]}
                for path in sorted(contents)
            },
            "file_count": len(file_hashes),
            "tree_sha256": sha256_bytes(files_listing(file_hashes)),
        }
        return {
            "manifest": manifest,
            "wheel": wheel,
            "contents": contents,
            "file_hashes": file_hashes,
            "modes": modes,
        }
    except BaseException:
        wheel.close()
        raise
