#!/usr/bin/env python3
"""Keep a GPU record as a summary plus one archive: README.md stays readable, the raw run goes into raw.tar.xz.

A record folder (gpu-harness/records/<date>-<what>/) holds what a device call returned: logs, JSON,
charts, per-call folders. Its README.md gives the exact commands and the figures, and stays a plain file
(`git grep` finds a record's numbers there). Everything else is packed into `raw.tar.xz` beside it:

  python3 gpu-harness/pack_record.py gpu-harness/records/<record> [...]

- members keep their paths relative to the record folder; a single-file `.xz` (a log compressed on its own)
  is stored decompressed under its name without `.xz` (the names the READMEs use), other archives
  (`logs.tar.xz`, `cells.tar.xz`) as they are;
- the archive is deterministic (sorted names, owner 0, one mtime: the record's date when its folder name
  starts with one), so packing the same files twice gives the same bytes;
- it is read back and compared with the files before they are removed; nothing is removed on a mismatch.

Read a record: `tar -tJf raw.tar.xz` lists it, `tar -xJOf raw.tar.xz call3-e2e-hybrid/summary.md` prints
one member, `tar -C /tmp/rec -xJf raw.tar.xz` unpacks it (outside the repository: lint and tests read the
tree). Standard library only, so it runs with any python3.
"""

from __future__ import annotations

import argparse
import calendar
import io
import lzma
import os
import re
import sys
import tarfile
import time
from pathlib import Path

ARCHIVE = "raw.tar.xz"
KEEP = {"README.md"}
PRESET = 9 | lzma.PRESET_EXTREME


def record_mtime(folder: Path) -> int:
    """The record's date (its folder name's YYYY-MM-DD, 00:00 UTC), else 0."""
    m = re.match(r"(\d{4}-\d{2}-\d{2})", folder.name)
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d")) if m else 0


def members(folder: Path) -> dict[str, bytes]:
    """{member name: bytes} of everything in the folder but README.md and the archive itself."""
    out: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel in KEEP or rel == ARCHIVE or not path.is_file():
            continue
        if path.is_symlink():
            raise ValueError(f"{path}: a link; a record holds plain files only")
        data = path.read_bytes()
        name = rel
        if rel.endswith(".xz") and not rel.endswith(".tar.xz"):
            name, data = rel[:-3], lzma.decompress(data)
        if name in out:
            raise ValueError(f"{folder}: both {name} and {name}.xz")
        out[name] = data
    return out


def pack_bytes(files: dict[str, bytes], mtime: int) -> bytes:
    """A deterministic .tar.xz of files (and the folders above them)."""
    dirs = sorted({"/".join(n.split("/")[:i]) for n in files for i in range(1, n.count("/") + 1)})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted([*dirs, *files]):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            if name in files:
                info.size, info.mode = len(files[name]), 0o644
                tar.addfile(info, io.BytesIO(files[name]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, preset=PRESET)


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, mode="r:xz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def pack(folder: Path) -> dict:
    """Pack one record folder; returns what was done (files, bytes before and after)."""
    if not (folder / "README.md").is_file():
        raise ValueError(f"{folder}: no README.md (a record's commands and figures go there first)")
    files = members(folder)
    archive = folder / ARCHIVE
    if not files:
        return {"record": str(folder), "packed": 0}
    if archive.exists():
        raise ValueError(f"{folder}: {ARCHIVE} exists and other files lie beside it ({sorted(files)[:3]}...): "
                         "unpack it, put them together, remove it and pack again")
    before = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != "README.md")
    data = pack_bytes(files, record_mtime(folder))
    tmp = archive.with_name(ARCHIVE + ".tmp")
    tmp.write_bytes(data)
    if read_archive(tmp) != files:
        tmp.unlink()
        raise RuntimeError(f"{folder}: the archive does not read back as the files; nothing removed")
    os.replace(tmp, archive)
    for path in sorted(folder.rglob("*"), key=lambda p: -len(p.parts)):
        if path in (archive, folder / "README.md"):
            continue
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
    return {"record": str(folder), "packed": len(files), "bytes_before": before, "bytes_after": len(data)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    for folder in args.folders:
        try:
            r = pack(folder)
        except (OSError, ValueError, RuntimeError, lzma.LZMAError) as exc:
            print(f"{folder}: {exc}", file=sys.stderr)
            return 1
        if r["packed"]:
            print(f"{folder}: {r['packed']} files, {r['bytes_before']} -> {r['bytes_after']} bytes in {ARCHIVE}")
        else:
            print(f"{folder}: nothing to pack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
