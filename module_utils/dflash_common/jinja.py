"""What the Jinja filters in filter_plugins/ share (controller side only).

Pure functions, no Ansible import. Each filter plugin adds the repository's module_utils/ to the package path of
ansible.module_utils itself (Ansible loads a plugin file by path under a generated module name, so nothing of the
repository is importable before that), then imports from here (docs/design.md, "Import path").
"""

from __future__ import annotations


def plain(value):
    """Ansible 2.19 hands lazy/tagged containers and scalars to filters: make them plain Python
    (dicts with str keys, lists, bool, None, int, float, str)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value
