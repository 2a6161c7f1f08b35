"""A host's prerequisites, checked in preflight and said all at once (deploy.yml play 1,
roles/dflash_layers/tasks/prerequisites.yml): the layers' interpreters exist (uv may not download one), the
driver suits every layer's CUDA, the service backend (systemd, or the runner where the host has none), and
free disk for the layers and the models. sudo is checked before these (deploy.yml: nothing else can be read
as root without it).

The layers' disk need is estimated from the overlay lock of the pinned sglang (files/patches/sglang/<v>/
overlay.lock.json: every wheel of the closure with its size): the wheels pushed to the host's wheelhouse,
uv's unpacked cache of them and the venv, about three times the wheels' bytes. A layer whose name already has
a directory under <prefix>/layers is taken as reused (no space needed). Pure functions, no Ansible import.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.dflash_common.progress import human_bytes

DISK_FACTOR = 3  # wheelhouse + uv cache + the installed venv, each about the wheels' size or more


def lock_wheel_bytes(patches_root, version) -> tuple[int | None, str | None]:
    """(bytes of the wheels, the lock file read) of the pinned version's overlay lock, else the nearest
    version's (said so), else (None, None)."""
    def read(v):
        path = os.path.join(patches_root, v, "overlay.lock.json")
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            return sum(int(w.get("size") or 0) for w in data.get("wheels") or []), path
        except (OSError, ValueError):
            return None, None

    got, path = read(version)
    if got:
        return got, path
    try:
        others = sorted(d for d in os.listdir(patches_root) if os.path.isdir(os.path.join(patches_root, d)))
    except OSError:
        others = []
    for v in others:
        got, path = read(v)
        if got:
            return got, f"{path} (no lock for {version}: the nearest version's, an estimate)"
    return None, None


def layers_need_bytes(layers, existing_names, wheel_bytes) -> int:
    """Bytes the layers to build need: nothing for a layer used as it is (existing_path) or whose name already
    has a directory (taken as reused); the estimate once when any layer is built."""
    to_build = [ly for ly in layers or [] if isinstance(ly, dict) and not ly.get("existing_path")
                and ly.get("name") not in set(existing_names or ())]
    return DISK_FACTOR * int(wheel_bytes or 0) if to_build else 0


def prerequisite_errors(host, *, interpreter_errors=(), driver_errors=(), service_manager=None,
                        service_mgr_fact=None, disk=None, layers_bytes=0, models_bytes=0,
                        layers_source=None) -> list[str]:
    """Every unmet prerequisite of one host, in words ([] = ready)."""
    errors = []
    for e in interpreter_errors:
        if "is not usable on this host" in e:
            e += (" -- install that Python on the host (Debian/Ubuntu: apt install python3.12, from the release or "
                  "deadsnakes) or name one it has in the layer's python; uv does not download interpreters here")
        errors.append(e if e.startswith(f"{host}:") else f"{host}: {e}")
    errors += list(driver_errors)
    if service_manager == "systemd" and service_mgr_fact and service_mgr_fact != "systemd":
        errors.append(f"{host}: dflash_service_manager is systemd but the host runs {service_mgr_fact} as its "
                      "service manager: leave dflash_service_manager unset (the runner backend is chosen for hosts "
                      "without systemd: no User=, sandboxing or Restart=) or deploy to a host with systemd")
    elif service_manager not in ("systemd", "runner"):
        errors.append(f"{host}: dflash_service_manager {service_manager!r} is not systemd or runner")
    disk = disk or {}
    need = int(layers_bytes or 0) + int(models_bytes or 0)
    if disk.get("error"):
        errors.append(f"{host}: cannot read the free space of {disk.get('path')}: {disk['error']}")
    elif need and disk.get("free_mib") is not None and disk["free_mib"] * 1024 * 1024 < need:
        parts = []
        if layers_bytes:
            how = f"3 x the wheels of {layers_source}" if str(layers_source).endswith(".json") or "lock" in str(
                layers_source) else layers_source
            parts.append(f"{human_bytes(layers_bytes)} for the venv layers ({how})")
        if models_bytes:
            parts.append(f"{human_bytes(models_bytes)} for the models and drafts to store")
        errors.append(f"{host}: {disk.get('path')} ({disk.get('mount')}) has {human_bytes(disk['free_mib'] * 1048576)} "
                      f"free, the deploy needs about {human_bytes(need)}: {' and '.join(parts)}; free space there "
                      "or move dflash_prefix / dflash_models_store")
    return errors
