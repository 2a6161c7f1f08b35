"""Patched sglang trees of every supported version for tests: the pinned PyPI wheel + the committed series.

`built_tree(version, root)` builds a tree with the toolkit's own tree stage (module_utils/dflash_tree/:
the wheel's sha256 checked against files/patches/sglang/<version>/wheels.json, the series applied in
memory, then written) and returns the tree stage's result. `sglang_modules(tree)` makes the tree's
`sglang` package importable under its real name without running its `__init__` (which imports the
whole server and a CUDA build): the parent packages are bare module objects whose `__path__` points into
the tree, so `importlib.import_module("sglang.srt.speculative.spec_info")` runs exactly that file and
what it imports. The sglang modules loaded before are put back afterwards, so trees of several versions
can be imported one after the other in one session.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from pathlib import Path

from ansible.module_utils.dflash_tree import disk as tree_disk
from ansible.module_utils.dflash_tree import series as tree_series
from ansible.module_utils.dflash_tree import wheel as tree_wheel
from sglang_wheel import patch_dir, pinned_sha256, sglang_wheel


def series(version: str) -> list:
    return tree_series.read_series_dir(str(patch_dir(version)))


def plan(version: str, patches=None) -> dict:
    """The tree stage's plan (dry run in memory); the caller closes it (tree_disk.close_plan)."""
    wheel = str(sglang_wheel(version=version))
    return tree_wheel.plan_wheel(
        wheel, pinned_sha256(version=version), series(version) if patches is None else patches
    )


def built_tree(version: str, root, patches=None) -> dict:
    """Build (or find) the tree under ``root``; the tree stage's result (``tree.path``, ``manifest``, ...)."""
    p = plan(version, patches)
    try:
        return tree_disk.ensure_tree(p, str(root))
    finally:
        tree_disk.close_plan(p)


PACKAGES = (
    "sglang",
    "sglang.srt",
    "sglang.srt.speculative",
    "sglang.srt.layers",
    "sglang.srt.layers.attention",
)


def module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def registry_stand_ins() -> dict:
    """From 0.5.23 on, spec_info.py and spec_registry.py import the resolution pipeline and the runtime
    context at module level (pulling the whole server) but call them only inside functions: stand-ins
    for those two, so that the registry itself can be imported."""
    return {
        "sglang.srt.arg_groups": module("sglang.srt.arg_groups", __path__=[]),
        "sglang.srt.arg_groups.overrides": module(
            "sglang.srt.arg_groups.overrides", resolving_view=lambda a: a, resolved_view=lambda a: a
        ),
        "sglang.srt.runtime_context": module("sglang.srt.runtime_context", get_spec=lambda: None),
    }


@contextlib.contextmanager
def sglang_modules(tree_path, stand_ins=None):
    """Import the tree's sglang modules by their real names (see the module doc); yields import_module.
    ``stand_ins`` ({name: module}) are put in place first, for modules that need a GPU build."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]
    try:
        for name in PACKAGES:
            mod = types.ModuleType(name)
            mod.__path__ = [str(Path(tree_path, *name.split(".")))]
            sys.modules[name] = mod
        sys.modules.update(stand_ins or {})
        yield importlib.import_module
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)
