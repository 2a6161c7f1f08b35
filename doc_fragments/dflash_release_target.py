"""Options the smoke-test modules (library/dflash_smoke.py, library/dflash_wait.py) share to name their
instances from a release (the argument spec is one function: module_utils/dflash_release/target.py
target_argument_spec)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  release_dir:
    description: Take the instances (args, unit) from this release's C(manifest.json).
    type: path
  names:
    description: With O(release_dir), only these instances (default all).
    type: list
    elements: str
"""
