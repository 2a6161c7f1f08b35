"""benchmarks/ddtree_step_ops.py: patches 0104-0105 take kernels off the step (real patched code, CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import ddtree_step_ops as B


def test_0104_0105_dispatch_no_commit_or_link_operators_fewer_in_verify_and_mask():
    _, v0, c0, l0, h0, m0, w0 = B.count("before", set(B.NEW))
    _, v1, c1, l1, h1, m1, w1 = B.count("after", ())
    assert c0 > 0 and l0 > 0 and h0 == 2  # before: the hybrid commit's gathers, the eager links, the arange
    assert (c1, l1, h1) == (0, 0, 0)  # after: host lists, one upload; links in the build graph
    assert v1 < v0  # the compaction kernels left verify
    assert m1 == 2 < m0  # the mask: one fill, one scatter with the build's index
    assert w0 == w1 and 0 < w1 < v1  # the walk (one graph on CUDA since 0106, unless SGLANG_DDTREE_WALK_GRAPH=0) is part of verify
