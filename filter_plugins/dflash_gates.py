"""Jinja filters of the smoke gates: thin wrappers over module_utils/dflash_gates_config.py."""

from __future__ import annotations

import os
import sys

_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in sys.path:
    sys.path.insert(0, _MU)

from dflash_gates_config import host_gate_errors
from dflash_jinja import plain as _plain


def dflash_smoke_gates_errors(gates, host):
    """Errors of the host's dflash_smoke_gates (list of strings naming host and field; empty = valid)."""
    return host_gate_errors(str(host), _plain(gates))


class FilterModule:
    def filters(self):
        return {"dflash_smoke_gates_errors": dflash_smoke_gates_errors}
