"""0108 on sglang 0.5.17: the GDN verify kernel launches in 16-wide value blocks (SGLANG_GDN_VERIFY_BLOCK_V).

As tests/unit/tree/test_gdn_verify_block.py does for 0.5.11, on the file of every version whose series has
0108 (0.5.17: sglang/kernels/ops/attention/fla/; 0.5.23 upstreamed a narrower verify block itself): the
launcher, patched and as the wheel has it, is called with the kernel replaced by a recorder; a call that
caches intermediate states (the target verify) launches BV = 16, every other call the wheel's 32, the
override takes 4, 8, 16 or 32 and refuses anything else when the module loads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from sglang_trees import built_tree, series
from sglang_wheel import versions

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it")
pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

PATCH = "0108-gdn-verify-block.patch"
REL = {"0.5.17": "sglang/kernels/ops/attention/fla/fused_sigmoid_gating_recurrent.py"}
VERSIONS = [v for v in versions() if v != "0.5.11" and PATCH in {p["name"] for p in series(v)}]


class Recorder:
    """Stands in for the Triton kernel: kernel[grid](**kwargs) records the grid and the block sizes."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(**kw):
            self.calls.append({"grid": tuple(grid), "BV": kw["BV"], "BK": kw["BK"]})

        return launch


@pytest.fixture(scope="module", params=VERSIONS)
def files(request, tmp_path_factory):
    version = request.param
    root = tmp_path_factory.mktemp("trees")
    patched = built_tree(version, root)["tree"]["path"]
    wheel = built_tree(version, root, patches=[])["tree"]["path"]
    return {"patched": Path(patched, REL[version]), "wheel": Path(wheel, REL[version])}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
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
    mod.fused_sigmoid_gating_delta_rule_update(**kw)
    return mod.fused_sigmoid_gating_delta_rule_update_kernel.calls[-1]


def test_the_verify_launches_in_16_wide_value_blocks_and_decode_keeps_32(files, monkeypatch):
    monkeypatch.delenv("SGLANG_GDN_VERIFY_BLOCK_V", raising=False)
    mod = load(files["patched"], "gdn_v2_patched")
    verify = launch(mod, verify=True)
    assert (verify["BV"], verify["BK"], verify["grid"]) == (16, 128, (1, 128 // 16, 2 * 6))
    decode = launch(mod, verify=False)
    assert (decode["BV"], decode["grid"]) == (32, (1, 128 // 32, 2 * 6))
    wheel = launch(load(files["wheel"], "gdn_v2_wheel"), verify=True)
    assert (wheel["BV"], wheel["grid"]) == (32, (1, 4, 12))


@pytest.mark.parametrize("value", ["4", "8", "32"])
def test_the_override_sets_the_verify_block_only(files, monkeypatch, value):
    monkeypatch.setenv("SGLANG_GDN_VERIFY_BLOCK_V", value)
    mod = load(files["patched"], f"gdn_v2_bv{value}")
    assert launch(mod, verify=True)["BV"] == int(value)
    assert launch(mod, verify=False)["BV"] == 32
    assert launch(mod, verify=True, V=4)["BV"] == min(4, int(value))


@pytest.mark.parametrize("value", ["12", "64", "0"])
def test_a_block_size_the_kernel_cannot_take_is_refused_when_the_module_loads(files, monkeypatch, value):
    monkeypatch.setenv("SGLANG_GDN_VERIFY_BLOCK_V", value)
    with pytest.raises(ValueError, match="SGLANG_GDN_VERIFY_BLOCK_V must be 4, 8, 16 or 32"):
        load(files["patched"], f"gdn_v2_bad{value}")
