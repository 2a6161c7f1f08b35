"""Removing a stage's directories (the layers and tree stages' pruning): each is first renamed to a hidden
name beside it, which the stage's scanners skip, then deleted, so that a crash in between never leaves a
half-deleted directory under a name that counts; the next prune clears the leftover."""

from __future__ import annotations

import os
import secrets
import shutil


def remove_dirs(paths, parent, tmp_prefix) -> list:
    """Remove the directories ``paths`` (children of ``parent``) through ``<tmp_prefix>prune-<name>-<rand>``."""
    for path in paths:
        trash = os.path.join(parent, f"{tmp_prefix}prune-{os.path.basename(path)}-{secrets.token_hex(4)}")
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
    return list(paths)
