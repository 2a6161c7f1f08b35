"""The ``series`` file of a patch folder: which patches, in which order."""

from __future__ import annotations

import os

from ansible.module_utils.dflash_tree.common import TreeError, sha256_bytes


def parse_series(text, where="series"):
    """Patch names from a quilt-style series: one name per line, ``#`` comments, blank lines."""
    names = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise TreeError(
                f"{where} line {lineno}: {raw!r}: one patch file name per line (no options; patches are -p1)"
            )
        if "/" in line or line.startswith("."):
            raise TreeError(f"{where} line {lineno}: {raw!r}: a plain file name in the series directory")
        if line in names:
            raise TreeError(f"{where} line {lineno}: {line} is listed twice")
        names.append(line)
    return names


def read_series_dir(path):
    """Read ``<path>/series`` and the patches it names: list of ``{name, content (bytes), sha256}``."""
    series_path = os.path.join(path, "series")
    if not os.path.isfile(series_path):
        raise TreeError(f"no series file at {series_path}")
    with open(series_path, encoding="utf-8") as f:
        names = parse_series(f.read(), series_path)
    patches = []
    for name in names:
        ppath = os.path.join(path, name)
        if not os.path.isfile(ppath):
            raise TreeError(f"{series_path} names {name}, but {ppath} does not exist")
        with open(ppath, "rb") as f:
            content = f.read()
        patches.append({"name": name, "content": content, "sha256": sha256_bytes(content)})
    return patches
