"""gpu-harness/gdn_chain_check.py's pure parts: the value-block variants it writes from the wheel's kernel
module, and the batched verify inputs (the GPU run itself is recorded under gpu-harness/records/)."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "gpu-harness"))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "tree"))
import gdn_chain_check as G

REL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"


def test_a_variant_changes_the_wheels_value_block_and_nothing_else():
    from test_ddtree_patch import series_texts

    wheel = series_texts([REL], exclude=("0108-gdn-verify-block.patch", "0109-gdn-tree-paths.patch"))[REL]
    variant = G.with_bv_cap(wheel, 8)
    assert "min(triton.next_power_of_2(V), 8)" in variant
    assert [a for a, b in zip(wheel.splitlines(), variant.splitlines()) if a != b] == ["    BK, " + G.CAP]
    # the series' text has its own block choice (0108): a variant of it would measure nothing
    with pytest.raises(SystemExit, match="not the wheel's"):
        G.with_bv_cap(series_texts([REL])[REL], 8)


def test_batched_inputs_give_each_request_its_own_state_and_cache_slot():
    one = G.inputs(torch, 4, [0, 0, 1, 1], heads=4, dim=8, device="cpu", key_heads=2)
    assert tuple(one["q"].shape) == (1, 4, 2, 8) and tuple(one["v"].shape) == (1, 4, 4, 8)
    three = G.batched(torch, one, 3, [0, 0, 1, 1])
    assert tuple(three["q"].shape) == (3, 4, 2, 8) and tuple(three["a"].shape) == (12, 4)
    assert three["initial_state_indices"].tolist() == [0, 1, 2] == three["intermediate_state_indices"].tolist()
    assert tuple(three["intermediate_states_buffer"].shape) == (3, 4, 4, 8, 8)
    assert three["retrieve_parent_token"].tolist() == [[0, 0, 1, 1]] * 3
    assert torch.equal(three["k"][2], one["k"][0])
