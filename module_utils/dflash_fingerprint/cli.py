"""CLI of scripts/fingerprint.py: ``--capture-dir DIR [--venv-python PY] | --replay-dir DIR``; prints the fact."""

from __future__ import annotations

import json
import sys

from ansible.module_utils.dflash_fingerprint.collect import collect_raw, read_capture, write_capture
from ansible.module_utils.dflash_fingerprint.merge import fingerprint_from_raw


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="GPU host fingerprint (dflash-deploy)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--capture-dir", help="collect on this host and write the raw outputs here")
    group.add_argument("--replay-dir", help="read a capture folder instead of running anything")
    ap.add_argument("--venv-python", help="base venv python: probe its torch")
    ap.add_argument("--proc-version-path", default="/proc/driver/nvidia/version")
    args = ap.parse_args(argv)
    if args.replay_dir:
        raw = read_capture(args.replay_dir)
    else:
        raw = collect_raw(venv_python=args.venv_python, proc_version_path=args.proc_version_path)
        if args.capture_dir:
            write_capture(raw, args.capture_dir)
    json.dump(fingerprint_from_raw(raw), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
