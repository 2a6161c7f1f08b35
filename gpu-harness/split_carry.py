#!/usr/bin/env python3
"""Plan how the harness's archives reach the GPU machine: carry calls that each fit one call's 64 MiB.

A device call takes the working tree plus what `carry` names, 64 MiB in all, 8 carried paths at most. The
archives (.gpu/*.tar.xz: the overlay's wheelhouse, the controller side's, the router's, the site bundle)
together with the tree pass that, so they travel in carry calls of their own before the calls that use them:

    python3 gpu-harness/split_carry.py plan .gpu/ctl-wheelhouse.tar.xz .gpu/wheelhouse.tar.xz [...]

measures the tree that travels (tracked and untracked-not-ignored files, and shared/ when there is one),
splits each archive that does not fit beside it into parts (ARCHIVE.partKofN, plain byte ranges), and prints
the calls, each `run(command="bash gpu-harness/carry.sh", carry=[...])` within the limit. Run them in order,
the machine kept warm (each within 30 s of the one before); gpu-harness/carry.sh keeps each archive, or joins
its parts once all have come, in $HOME/wh, where every harness script looks. xz's own checks catch a wrong join.

    python3 gpu-harness/split_carry.py ARCHIVE N      (split one archive into N parts; plan does it for you)
"""
from __future__ import annotations

import glob
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 64 << 20  # one call: the tree and what it carries
MAX_PATHS = 8  # carried paths a call takes
MARGIN = 2 << 20  # the tree grows between the plan and the calls (a commit, a log)


def part_names(archive: str, n: int) -> list[str]:
    return [f"{archive}.part{i}of{n}" for i in range(1, n + 1)]


def split(archive: str, n: int) -> list[str]:
    if n < 1:
        raise ValueError(f"parts: {n}: must be at least 1")
    size = os.path.getsize(archive)
    if size < n:
        raise ValueError(f"{archive}: {size} bytes cannot make {n} parts")
    step = -(-size // n)
    names = part_names(archive, n)
    with open(archive, "rb") as src:
        for name in names:
            with open(name + ".tmp", "wb") as dst:
                dst.write(src.read(step))
            os.replace(name + ".tmp", name)
    return names


def tree_bytes(root: str = ROOT) -> int:
    """What a call sends besides the carried paths: tracked and untracked-not-ignored files, and shared/."""
    out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    paths = {os.path.join(root, p) for p in out.decode(errors="surrogateescape").split("\0") if p}
    shared = os.path.join(root, "shared")
    if os.path.isdir(shared):
        for d, _dirs, files in os.walk(shared):
            paths.update(os.path.join(d, f) for f in files)
    total = 0
    for p in paths:
        try:
            total += os.lstat(p).st_size
        except FileNotFoundError:  # deleted in the work tree, not sent
            pass
    return total


def plan(archives: list[str], tree: int, limit: int = LIMIT, margin: int = MARGIN) -> list[list[str]]:
    """The carry calls: each a list of paths (whole archives or parts, split here) within limit with the tree."""
    room = limit - tree - margin
    if room <= 0:
        raise ValueError(f"the tree that travels ({tree / 2**20:.1f} MiB) leaves no room to carry anything in "
                         f"{limit / 2**20:.0f} MiB")
    items = []
    for a in archives:
        size = os.path.getsize(a)
        for stale in glob.glob(glob.escape(a) + ".part*of*"):  # parts of an earlier split of this name
            os.unlink(stale)
        if size <= room:
            items.append((a, size))
        else:
            items += [(p, os.path.getsize(p)) for p in split(a, math.ceil(size / room))]
    calls, load = [], []
    for path, size in items:
        if not calls or load[-1] + size > room or len(calls[-1]) >= MAX_PATHS:
            calls.append([])
            load.append(0)
        calls[-1].append(path)
        load[-1] += size
    return calls


def main(argv: list[str]) -> int:
    if argv and argv[0] == "plan":
        archives = argv[1:]
        if not archives or not all(os.path.isfile(a) for a in archives):
            print("plan: name the archives (.gpu/*.tar.xz) to carry; each must exist", file=sys.stderr)
            return 2
        outside = [a for a in archives if os.path.relpath(os.path.abspath(a), ROOT).startswith("..")]
        if outside:
            print(f"plan: carried paths lie in the repository (.gpu/ is ignored there): {outside}", file=sys.stderr)
            return 2
        tree = tree_bytes()
        try:
            calls = plan(archives, tree)
        except ValueError as exc:
            print(f"plan: {exc}", file=sys.stderr)
            return 2
        room = LIMIT - tree - MARGIN
        print(f"# the tree that travels: {tree / 2**20:.1f} MiB; each carry call below holds at most "
              f"{room / 2**20:.1f} MiB; run them in order, each within 30 s of the one before, then the stages' "
              "calls, which carry none of these")
        for paths in calls:
            carried = ", ".join(f'"{os.path.relpath(os.path.abspath(p), ROOT)}"' for p in paths)
            print(f'run(command="bash gpu-harness/carry.sh", carry=[{carried}], timeout_s=120)')
        return 0
    if len(argv) != 2 or not argv[1].isdigit():
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    for name in split(argv[0], int(argv[1])):
        print(f"{name}\t{os.path.getsize(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
