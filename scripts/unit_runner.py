#!/usr/bin/env python3
"""Run a rendered systemd unit on a host without systemd: CLI over module_utils/dflash_service/runner.py.

  unit_runner.py start  UNIT_FILE --log FILE --pidfile FILE
  unit_runner.py stop   --pidfile FILE [--timeout S]
  unit_runner.py status --pidfile FILE          (exit 0 running, 3 stopped)
  unit_runner.py show   UNIT_FILE               (print argv and environment as JSON)
"""
import argparse
import json
import pathlib
import sys

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(pathlib.Path(__file__).resolve().parents[1] / "module_utils"))
from ansible.module_utils.dflash_service import runner as R


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("unit")
    s.add_argument("--log", required=True)
    s.add_argument("--pidfile", required=True)
    s = sub.add_parser("stop")
    s.add_argument("--pidfile", required=True)
    s.add_argument("--timeout", type=float, default=30)
    s = sub.add_parser("status")
    s.add_argument("--pidfile", required=True)
    s = sub.add_parser("show")
    s.add_argument("unit")
    a = ap.parse_args()
    if a.cmd == "start":
        print(R.start(a.unit, a.log, a.pidfile))
    elif a.cmd == "stop":
        R.stop(a.pidfile, a.timeout)
        print("stopped")
    elif a.cmd == "status":
        st = R.show(a.pidfile)
        print(json.dumps(st))
        sys.exit(0 if st["ActiveState"] == "active" else 3)
    else:
        print(json.dumps(R.resolve(pathlib.Path(a.unit).read_text(), unit_name=pathlib.Path(a.unit).name), indent=1))


if __name__ == "__main__":
    main()
