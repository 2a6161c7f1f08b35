"""Write device paths in a GPU record as placeholders before it is committed.

A device call returns files that name the GPU machine's paths: its home (where the harnesses keep
their work trees and the site bundle), its $OUT, and the repository copy the command ran in (the
same path as the checkout that made the call). A record keeps them as ``<out>``, ``<home>`` and
``<repo>``. Text files (.md, .log, .json, .jsonl, .txt) are rewritten in place, ``.xz`` files
decompressed, rewritten and compressed again, ``.tar.xz`` archives re-packed member by member.
Files with nothing to replace are left untouched (their bytes and times stay).

  python3 gpu-harness/scrub_record.py gpu-harness/records/<record> [--home /root] [--out /root/out]
    [--repo <the device's repository root; default: this checkout's root>] [--check]

--check changes nothing and exits 1 when a file still names one of the paths. The defaults are the GPU
machine's HOME and $OUT as its calls report them (the first lines of each harness's run.log), not paths of the
machine that commits the record.
"""

from __future__ import annotations

import argparse
import io
import lzma
import os
import sys
import tarfile
from pathlib import Path

TEXT = (".md", ".log", ".json", ".jsonl", ".txt", ".csv")


def replacements(home: str, out: str, repo: str):
    """Longest first, so that $OUT (inside $HOME) and the repository win over $HOME."""
    pairs = [(out, "<out>"), (repo, "<repo>"), (home, "<home>")]
    return sorted(((a.rstrip("/"), b) for a, b in pairs if a and a != "/"), key=lambda p: -len(p[0]))


def scrub_text(text: str, pairs) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def scrub_bytes(name: str, data: bytes, pairs) -> bytes:
    """``data`` of a file called ``name`` with the paths replaced (unchanged bytes if none occur)."""
    if name.endswith(".tar.xz"):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as src:
            members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]
        new = [(m, scrub_bytes(m.name, d, pairs) if d is not None else None) for m, d in members]
        if all(a[1] == b[1] for a, b in zip(members, new, strict=True)):
            return data
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as dst:
            for m, d in new:
                if d is not None:
                    m.size = len(d)
                    dst.addfile(m, io.BytesIO(d))
                else:
                    dst.addfile(m)
        return buf.getvalue()
    if name.endswith(".xz"):
        inner = lzma.decompress(data)
        changed = scrub_bytes(name[:-3], inner, pairs)
        return data if changed == inner else lzma.compress(changed)
    if name.endswith(TEXT):
        text = data.decode("utf-8", errors="surrogateescape")
        new = scrub_text(text, pairs)
        return data if new == text else new.encode("utf-8", errors="surrogateescape")
    return data


def names_a_path(name: str, data: bytes, pairs) -> bool:
    return scrub_bytes(name, data, pairs) != data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--home", default="/root")
    ap.add_argument("--out", default="/root/out")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    pairs = replacements(args.home, args.out, args.repo)
    dirty = []
    for folder in args.folders:
        for path in sorted(Path(folder).rglob("*")):
            if not path.is_file():
                continue
            data = path.read_bytes()
            new = scrub_bytes(path.name, data, pairs)
            if new == data:
                continue
            dirty.append(str(path))
            if not args.check:
                os.chmod(path, 0o644)
                path.write_bytes(new)
    verb = "names a device path" if args.check else "rewritten"
    for p in dirty:
        print(f"{verb}: {p}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
