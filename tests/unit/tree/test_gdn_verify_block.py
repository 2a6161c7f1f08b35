"""Patch 0108: sglang's GDN verify kernel launches in 16-wide value blocks (SGLANG_GDN_VERIFY_BLOCK_V).

The launcher of fla/fused_sigmoid_gating_recurrent.py, patched and as the pinned wheel has it, is called with
the kernel replaced by a recorder: a call that caches intermediate states (the speculative target verify)
must launch with BV = 16 (grid (1, V / 16, requests x value heads)), every other call with the wheel's 32; the
override takes 4, 8, 16 or 32 and refuses anything else when the module loads. That the blocks compute the
same numbers is the kernel's own structure (each value column of the state on its own); the GPU sweep
(`gpu-harness/gdn_chain_check.py sweep`) compares outputs and cached states across block sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_ddtree_patch import load_text, series_texts

REL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"
PATCH = "0108-gdn-verify-block.patch"


@pytest.fixture(scope="module")
def texts():
    patched = series_texts([REL])[REL]
    upstream = series_texts([REL], exclude=(PATCH, "0109-gdn-tree-paths.patch"))[REL]
    assert "_VERIFY_BLOCK_V" in patched and "_VERIFY_BLOCK_V" not in upstream
    return {"patched": patched, "upstream": upstream}


class Recorder:
    """Stands in for the Triton kernel: kernel[grid](**kwargs) records the grid and the block sizes."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(**kw):
            self.calls.append({"grid": tuple(grid), "BV": kw["BV"], "BK": kw["BK"], "cache": kw["CACHE_INTERMEDIATE_STATES"]})

        return launch


def load(text, tmp_path, name):
    mod = load_text(text, tmp_path, name)
    mod.fused_sigmoid_gating_delta_rule_update_kernel = Recorder()
    return mod


def launch(mod, verify, requests=2, steps=4, H=2, HV=6, K=128, V=128):
    """One call of the launcher at Qwen3.5-class head sizes (K = V = 128): a verify caches its states."""
    z = torch.zeros
    kw = {"A_log": z(HV), "a": z(requests * steps, HV), "dt_bias": z(HV), "softplus_beta": 1.0, "softplus_threshold": 20.0,
          "q": z(requests, steps, H, K), "k": z(requests, steps, H, K), "v": z(requests, steps, HV, V),
          "b": z(requests, steps, HV), "initial_state_source": z(requests, HV, K, V),
          "initial_state_indices": torch.arange(requests, dtype=torch.int32), "use_qk_l2norm_in_kernel": True}  # fmt: skip
    if verify:
        kw.update(disable_state_update=True, intermediate_states_buffer=z(requests, steps, HV, K, V),
                  intermediate_state_indices=torch.arange(requests, dtype=torch.int32), cache_steps=steps)  # fmt: skip
    out = mod.fused_sigmoid_gating_delta_rule_update(**kw)
    assert tuple(out.shape) == (requests, steps, HV, V)
    return mod.fused_sigmoid_gating_delta_rule_update_kernel.calls[-1]


def test_the_verify_launches_in_16_wide_value_blocks_and_decode_keeps_32(texts, tmp_path, monkeypatch):
    monkeypatch.delenv("SGLANG_GDN_VERIFY_BLOCK_V", raising=False)
    mod = load(texts["patched"], tmp_path, "gdn_patched")
    verify = launch(mod, verify=True)
    assert (verify["BV"], verify["BK"], verify["cache"]) == (16, 128, True)
    assert verify["grid"] == (1, 128 // 16, 2 * 6)
    decode = launch(mod, verify=False)
    assert (decode["BV"], decode["grid"], decode["cache"]) == (32, (1, 128 // 32, 2 * 6), False)
    # the wheel launches the verify in 32-wide blocks: half the programs, each twice the work
    wheel = launch(load(texts["upstream"], tmp_path, "gdn_upstream"), verify=True)
    assert (wheel["BV"], wheel["grid"]) == (32, (1, 4, 12))


@pytest.mark.parametrize("value", ["4", "8", "32"])
def test_the_override_sets_the_verify_block_only(texts, tmp_path, monkeypatch, value):
    monkeypatch.setenv("SGLANG_GDN_VERIFY_BLOCK_V", value)
    mod = load(texts["patched"], tmp_path, f"gdn_bv{value}")
    assert launch(mod, verify=True)["BV"] == int(value)
    assert launch(mod, verify=False)["BV"] == 32
    # a value head narrower than the block: the block is the head (next power of two)
    assert launch(mod, verify=True, V=4)["BV"] == min(4, int(value))


@pytest.mark.parametrize("value", ["12", "64", "0"])
def test_a_block_size_the_kernel_cannot_take_is_refused_when_the_module_loads(texts, tmp_path, monkeypatch, value):
    monkeypatch.setenv("SGLANG_GDN_VERIFY_BLOCK_V", value)
    with pytest.raises(ValueError, match="SGLANG_GDN_VERIFY_BLOCK_V must be 4, 8, 16 or 32"):
        load(texts["patched"], tmp_path, f"gdn_bad{value}")
