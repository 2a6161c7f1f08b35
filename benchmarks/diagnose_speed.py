#!/usr/bin/env python3
"""Time dflash_diagnose on long journals: the first fatal error at the top, healthy traffic after.

Usage: python benchmarks/diagnose_speed.py [SIZE_MB ...]   (default: 1 16 100)
Writes the logs to a temporary folder and prints one line per size.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils"))

from ansible.module_utils.dflash_diagnose.engine import diagnose_file

ROOT_CAUSE = "May 23 10:15:01 ct200 python3[4242]: ModuleNotFoundError: No module named 'soundfile'\n"
FILLER = ("May 23 10:15:02 ct200 python3[4242]: [2026-05-23 10:15:02 TP0] Decode batch. #running-req: 1, "
          "#token: 100, token usage: 0.01, gen throughput (token/s): 120.0, #queue-req: 0\n")
TAIL = ("May 23 11:00:00 ct200 python3[4242]: [2026-05-23 11:00:00] Received sigquit from a child process.\n"
        "May 23 11:00:00 ct200 systemd[1]: dflash-a.service: Main process exited, code=exited, status=1/FAILURE\n")


def main(sizes: list[int]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            path = os.path.join(tmp, f"{mb}mb.log")
            with open(path, "w") as fh:
                fh.write(ROOT_CAUSE)
                fh.write(FILLER * (mb * 1024 * 1024 // len(FILLER)))
                fh.write(TAIL)
            t0 = time.perf_counter()
            res = diagnose_file(path)
            took = time.perf_counter() - t0
            print(f"{mb:>5} MB  {took:6.2f} s  cause={res['cause']}  read={res['bytes'] - res['skipped_bytes']} "
                  f"bytes  skipped={res['skipped_bytes']}")
            if res["cause"] != "missing_module":
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [1, 16, 100]))
