#!/usr/bin/env python3
"""Stage a model folder onto tmpfs (dflash-stage-<name>.service): dflash-stage-model SOURCE DEST.

Copies SOURCE's files into DEST, skipping files already there with the same size and mtime, each
file through a temporary name and a rename (a crash never leaves a half file under its real
name). Progress goes to stdout (the journal): a line every 5 % or every 10 s. stdlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

CHUNK = 16 * 1024 * 1024
MARKER = ".dflash-staged.json"


def plan(src, dst):
    """-> (to_copy [(rel, size)], skipped_bytes, total_bytes)."""
    todo, skipped, total = [], 0, 0
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            s = os.path.join(root, f)
            rel = os.path.relpath(s, src)
            st = os.stat(s)
            total += st.st_size
            try:
                dt = os.stat(os.path.join(dst, rel))
                if dt.st_size == st.st_size and int(dt.st_mtime) == int(st.st_mtime):
                    skipped += st.st_size
                    continue
            except FileNotFoundError:
                pass
            todo.append((rel, st.st_size))
    return todo, skipped, total


def gib(n):
    return f"{n / 2**30:.2f} GiB"


def stage(src, dst, out=sys.stdout, every_pct=5.0, every_s=10.0):
    if not os.path.isdir(src):
        print(f"dflash-stage: source {src} is not a directory", file=out, flush=True)
        return 2
    todo, done, total = plan(src, dst)
    print(f"dflash-stage: {src} -> {dst}: {len(todo)} file(s) to copy, {gib(total - done)} of {gib(total)} "
          f"({gib(done)} already staged)", file=out, flush=True)
    start = last_t = time.monotonic()
    last_pct = -every_pct
    copied = 0
    for rel, _size in todo:
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        tmp = f"{d}.dflash-tmp-{os.getpid()}"
        with open(s, "rb") as fi, open(tmp, "wb") as fo:
            while True:
                buf = fi.read(CHUNK)
                if not buf:
                    break
                fo.write(buf)
                copied += len(buf)
                now = time.monotonic()
                pct = 100.0 * (done + copied) / total if total else 100.0
                if pct - last_pct >= every_pct or now - last_t >= every_s:
                    rate = copied / max(now - start, 1e-6)
                    print(f"dflash-stage: {pct:5.1f}% {gib(done + copied)} / {gib(total)} "
                          f"({rate / 2**20:.0f} MiB/s)", file=out, flush=True)
                    last_pct, last_t = pct, now
        shutil.copystat(s, tmp)
        os.replace(tmp, d)
    with open(os.path.join(dst, MARKER), "w", encoding="utf-8") as fh:
        json.dump({"source": src, "bytes": total, "copied_bytes": copied, "files_copied": len(todo),
                   "seconds": round(time.monotonic() - start, 3)}, fh)
    print(f"dflash-stage: done, 100.0% {gib(total)} in {time.monotonic() - start:.1f} s "
          f"({len(todo)} file(s) copied)", file=out, flush=True)
    return 0


def main(argv):
    if len(argv) != 3:
        print("usage: dflash-stage-model SOURCE DEST", file=sys.stderr)
        return 2
    return stage(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
