"""Jinja filters of the smoke gates: thin wrappers over module_utils/dflash_release/gates_config.py."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_release.gates_config import host_gate_errors


def dflash_smoke_gates_errors(gates, host):
    """Errors of the host's dflash_smoke_gates (list of strings naming host and field; empty = valid)."""
    return host_gate_errors(str(host), _plain(gates))


class FilterModule:
    def filters(self):
        return {"dflash_smoke_gates_errors": dflash_smoke_gates_errors}
