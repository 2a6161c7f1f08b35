"""bench/ddtree_step_ops.py: patch 0104 takes the commit's kernels off the step (real patched code, CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import ddtree_step_ops as B


def test_0104_dispatches_no_commit_or_link_operators_and_fewer_in_verify():
    _, v0, c0, l0, h0 = B.count("before", {B.NEW})
    _, v1, c1, l1, h1 = B.count("after", ())
    assert c0 > 0 and l0 > 0 and h0 == 2  # before: the hybrid commit's gathers, the eager links, the arange
    assert (c1, l1, h1) == (0, 0, 0)  # after: host lists, one upload; links in the build graph
    assert v1 < v0  # the compaction kernels left verify
