"""gpu-harness/conv_tree_check.py's pure parts and a dry run of its sweep under Triton's CPU interpreter (the GPU run
itself is recorded under gpu-harness/records/2026-12-03-ddtree-paths/)."""

from __future__ import annotations

import json
import os
import random
import sys

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
triton = pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
import conv_tree_check as C


def test_links_are_first_child_and_next_sibling_and_trees_keep_parents_before_children():
    parents = [-1, 0, 0, 1, 2, 1, 0]
    nxt, sib = C.links(parents)
    assert nxt == [1, 3, 4, -1, -1, -1, -1]
    assert sib == [-1, 2, 6, 5, -1, -1, -1]
    rng = random.Random(3)
    for steps in (4, 16, 32):
        tree = C.ddtree_like(steps, rng)
        assert tree[0] == -1 and all(0 <= p < j for j, p in enumerate(tree) if j)
        assert C.depth(tree, 0) == 0 and max(C.depth(tree, j) for j in range(steps)) <= steps - 1


def test_the_inputs_hand_the_kernels_the_parents_the_wheel_derives():
    case = C.inputs(torch, 2, 8, 12, [-1, 0, 1, 1, 0, 4, 5, 2], "cpu")
    assert case["parents"].tolist() == [[0, 0, 1, 1, 0, 4, 5, 2]] * 2  # the root's -1 becomes 0
    assert tuple(case["x"].shape) == (2, 12, 8) and case["x"].stride(1) == 1  # channels contiguous, as in sglang
    assert tuple(case["conv_state"].shape) == (3, 12, 3) and case["conv_state"].stride(1) == 1
    assert case["conv_state_indices"].tolist() == [1, 2]


def test_a_cpu_dry_run_compares_every_variant_with_the_wheels_tree_path(tmp_path):
    if type(triton.language.zeros).__name__ != "InterpretedFunction":
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)")
    C.prepare(str(tmp_path / "src"))
    out = tmp_path / "sweep.json"
    assert C.sweep(str(tmp_path / "src"), str(out), [16], [24], 1, 1, device="cpu", warps=(4, 8)) == 0
    result = json.loads(out.read_text())
    assert result["verdict"] == "PASS" and len(result["rows"]) == 4
    for row in result["rows"]:
        assert row["parents16_identical"] == row["parents16w8_identical"] == {"out": True, "windows": True, "state": True}
