"""Jinja filters of the layers stage's prerequisites (roles/dflash_layers/tasks/prerequisites.yml): thin wrappers
over module_utils/dflash_layers/prerequisites.py and dflash_fingerprint/gate.py."""

from __future__ import annotations

import os

import ansible.module_utils

# The repository's module_utils/ under the name the modules import it by (this file is loaded by path; docs/design.md,
# "Import path")
_MU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dflash_common.jinja import plain as _plain
from ansible.module_utils.dflash_fingerprint.gate import check_driver_compat as _driver
from ansible.module_utils.dflash_layers import prerequisites as _pre


def dflash_layers_prerequisite_errors(facts, host):
    """Every unmet prerequisite of ``host`` from one mapping of what preflight read (the task's vars)."""
    f = _plain(facts or {})
    inspect = f.get("inspect") or {}
    layers = f.get("layers") or []
    wheel_bytes, lock = _pre.lock_wheel_bytes(f.get("patches_root") or "", str(f.get("sglang_version") or ""))
    need_mib = f.get("layers_need_mib")
    if need_mib not in (None, ""):
        layers_bytes, lock = int(need_mib) * 1048576, "dflash_layers_disk_need_mib"
        if not _pre.layers_need_bytes(layers, inspect.get("existing_names"), 1):
            layers_bytes = 0
    else:
        layers_bytes = _pre.layers_need_bytes(layers, inspect.get("existing_names"), wheel_bytes)
    interp = list(inspect.get("errors") or ([] if not inspect.get("failed") else [inspect.get("msg") or "?"]))
    return _pre.prerequisite_errors(
        host, interpreter_errors=interp,
        driver_errors=_driver(f.get("fingerprint") or {}, layers, host,
                              bool(f.get("allow_minor_version_compat"))) if f.get("fingerprint") else [],
        service_manager=f.get("service_manager"), service_mgr_fact=f.get("service_mgr"),
        disk=inspect.get("disk"), layers_bytes=layers_bytes, models_bytes=int(f.get("models_bytes") or 0),
        layers_source=lock)


class FilterModule:
    def filters(self):
        return {"dflash_layers_prerequisite_errors": dflash_layers_prerequisite_errors}
