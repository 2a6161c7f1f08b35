"""Names of a tree's files, the errors of the tree stage, hashing."""

from __future__ import annotations

import base64
import hashlib

MANIFEST = "manifest.json"


FILES_LIST = "FILES.sha256"


MANIFEST_FORMAT = 1


PACKAGE = "sglang"


TREE_PREFIX = "sglang-"


TMP_PREFIX = ".tmp-"


OLD_PREFIX = ".old-"


class TreeError(Exception):
    """Anything wrong with the inputs or the tree that is not a patch hunk."""


class PatchError(TreeError):
    """A patch does not apply. Names the patch, the file and the hunk (number and header line)."""

    def __init__(self, patch, reason, file=None, hunk=None, header=None):
        self.patch = patch
        self.file = file
        self.hunk = hunk
        self.header = header
        self.reason = reason
        where = f"patch {patch}"
        if file:
            where += f", file {file}"
        if hunk is not None:
            where += f", hunk #{hunk}"
            if header:
                where += f" ({header})"
        super().__init__(f"{where}: {reason}")


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_hash_to_hex(value):
    """RECORD's ``sha256=<urlsafe b64, no padding>`` -> hex digest."""
    algo, _, b64 = value.partition("=")
    if algo != "sha256" or not b64:
        raise TreeError(f"unsupported RECORD hash {value!r}")
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
