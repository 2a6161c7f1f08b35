#!/usr/bin/env python3
"""Split a carried archive into N parts for separate device calls (one call carries 64 MiB with the tree).

    python3 gpu-harness/split_carry.py .gpu/wheelhouse.tar.xz 2
      -> .gpu/wheelhouse.tar.xz.part1of2, .gpu/wheelhouse.tar.xz.part2of2

gpu-harness/wheels.sh on the GPU machine keeps each carried part under $WH/parts and, once every part of a
name has come (the machine kept warm between the calls), joins them in order and unpacks the archive as if
it had been carried whole. The parts are plain byte ranges; xz's own checks catch a wrong join.
"""
from __future__ import annotations

import os
import sys


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


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for name in split(argv[0], int(argv[1])):
        print(f"{name}\t{os.path.getsize(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
