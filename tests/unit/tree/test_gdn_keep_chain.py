"""Patch 0108: the GDN tree verify kernel keeps a chain's state in registers (SGLANG_DDTREE_GDN_KEEP_CHAIN=1).

sglang's fused sigmoid-gating delta-rule kernel (fla/fused_sigmoid_gating_recurrent.py) runs here under
Triton's CPU interpreter (tests/conftest.py sets TRITON_INTERPRET=1), patched and as the pinned wheel has
it, on small tree verifies: random parents (chains and branches), two requests, a float32
intermediate-state cache. With the switch on, the outputs and every cached state must be bit for
bit the unpatched kernel's; with a bfloat16 cache the switch must not apply (a register state would then
differ from the rounded reload).
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
triton = pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_ddtree_patch import series_texts

REL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"
PATCH = "0108-gdn-keep-chain-state.patch"


def load(text, name, folder):
    path = folder / f"{name}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    if type(triton.language.zeros).__name__ != "InterpretedFunction":
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)")
    folder = tmp_path_factory.mktemp("gdn")
    patched = series_texts([REL])[REL]
    upstream = series_texts([REL], exclude=(PATCH,))[REL]
    assert "KEEP_CHAIN_STATE" in patched and "KEEP_CHAIN_STATE" not in upstream
    return load(patched, "gdn_patched", folder), load(upstream, "gdn_upstream", folder)


def verify_inputs(seed, requests, steps, cache_dtype, H=2, HV=4, K=16, V=16):
    """A tree verify of ``requests`` x ``steps`` tokens (the layout sglang's DDTREE / EAGLE verify uses:
    the same width per request): q, k, v, gates, initial states, a cache, and each request's parents
    (token j's parent is an earlier token: chains and branches mixed). Not varlen: Triton's interpreter
    cannot loop over a length read from memory."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    parents = torch.zeros((requests, steps), dtype=torch.int64)
    for n in range(requests):
        for j in range(1, steps):
            parents[n, j] = j - 1 if rng.random() < 0.5 else rng.randrange(j)
    return {
        "A_log": -torch.rand(HV, generator=gen),
        "a": torch.randn(requests * steps, HV, generator=gen),
        "dt_bias": torch.randn(HV, generator=gen),
        "softplus_beta": 1.0,
        "softplus_threshold": 20.0,
        "q": torch.randn(requests, steps, H, K, generator=gen),
        "k": torch.randn(requests, steps, H, K, generator=gen),
        "v": torch.randn(requests, steps, HV, V, generator=gen),
        "b": torch.randn(requests, steps, HV, generator=gen),
        "initial_state_source": torch.randn(requests + 1, HV, V, K, generator=gen),
        "initial_state_indices": torch.arange(1, requests + 1, dtype=torch.int32),
        "use_qk_l2norm_in_kernel": True,
        "disable_state_update": True,
        "intermediate_states_buffer": torch.zeros(requests, steps, HV, V, K, dtype=cache_dtype),
        "intermediate_state_indices": torch.arange(requests, dtype=torch.int32),
        "cache_steps": steps,
        "retrieve_parent_token": parents,
    }


def run(mod, inputs, keep, monkeypatch):
    if hasattr(mod, "_KEEP_CHAIN_STATE"):
        monkeypatch.setattr(mod, "_KEEP_CHAIN_STATE", keep)
    args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    out = mod.fused_sigmoid_gating_delta_rule_update(**args)
    return out, args["intermediate_states_buffer"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_keeping_a_chain_s_state_changes_nothing_with_a_float32_cache(kernels, monkeypatch, seed):
    patched, upstream = kernels
    inputs = verify_inputs(seed, 2, 8, torch.float32)
    assert any(int(p) == j - 1 for p_row in inputs["retrieve_parent_token"] for j, p in enumerate(p_row.tolist()) if j)
    assert any(int(p) < j - 1 for p_row in inputs["retrieve_parent_token"] for j, p in enumerate(p_row.tolist()) if j)
    want_out, want_cache = run(upstream, inputs, None, monkeypatch)
    for keep in (False, True):
        out, cache = run(patched, inputs, keep, monkeypatch)
        assert torch.equal(out, want_out) and torch.equal(cache, want_cache), keep
    assert want_cache.abs().sum() > 0  # the cache was written


def test_a_bfloat16_cache_keeps_the_reload(kernels, monkeypatch):
    patched, upstream = kernels
    inputs = verify_inputs(7, 2, 6, torch.bfloat16)
    want_out, want_cache = run(upstream, inputs, None, monkeypatch)
    out, cache = run(patched, inputs, True, monkeypatch)
    assert torch.equal(out, want_out) and torch.equal(cache, want_cache)


def test_the_switch_is_off_unless_set(kernels):
    patched, _ = kernels
    text = Path(patched.__file__).read_text(encoding="utf-8")
    assert '_KEEP_CHAIN_STATE = os.environ.get("SGLANG_DDTREE_GDN_KEEP_CHAIN", "0") == "1"' in text
