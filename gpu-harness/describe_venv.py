#!/usr/bin/env python3
"""What an existing venv provides to a layer above it, as JSON: its interpreter (version, machine,
libc) and every distribution its site dirs expose (name, version, Requires-Dist, Requires-Python,
Provides-Extra), read the way the role reads an existing_path base (module_utils/dflash_layers/overlay.py).
Reads only.

The GPU machine's /opt/torch/.venv described this way (gpu-harness/capture_base.sh) lets
gpu-harness/make_wheelhouse.py --compute resolve the overlay for it on the controller, exactly as the
role then resolves it on the machine, offline, from the carried wheelhouse.

usage: describe_venv.py VENV [> base.json]
"""
import json
import os
import sys

import ansible.module_utils  # the toolkit's code by its one name (docs/design.md, "Import path")

ansible.module_utils.__path__.append(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))

from ansible.module_utils.dflash_layers import build as L
from ansible.module_utils.dflash_layers import overlay as O


def describe_venv(venv):
    python = os.path.join(venv, "bin", "python")
    interp = L.inspect_interpreter(python)
    view = O.view_paths(python, interp["site"], L.default_runner)
    dists = O.describe(view)
    return {"venv": venv, "interpreter": interp, "view": view, "freeze": O.freeze(dists), "distributions": dists}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    json.dump(describe_venv(sys.argv[1].rstrip("/")), sys.stdout, indent=1, sort_keys=True)
    print()
