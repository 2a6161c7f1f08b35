#!/usr/bin/env python3
"""A host's fingerprint from the repository checkout (module_utils/dflash_fingerprint/cli.py):

  scripts/fingerprint.py --capture-dir DIR [--venv-python PY]   collect here, write the raw outputs to DIR
  scripts/fingerprint.py --replay-dir DIR                       the fact of a capture folder

Prints the dflash_fingerprint fact as JSON. Needs ansible-core importable (the controller's .venv); on a host
without it, `ansible HOST -m dflash_fingerprint -a capture_dir=DIR` captures through Ansible instead.
"""
import pathlib
import sys

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(str(pathlib.Path(__file__).resolve().parents[1] / "module_utils"))
from ansible.module_utils.dflash_fingerprint.cli import main

if __name__ == "__main__":
    sys.exit(main())
