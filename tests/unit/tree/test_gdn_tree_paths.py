"""Patch 0109: the GDN tree verify node by node (fused_gdn_tree_paths_kernel, SGLANG_GDN_TREE_PATHS=auto|1|0).

The patched fla/fused_sigmoid_gating_recurrent.py runs here under Triton's CPU interpreter (tests/conftest.py
sets TRITON_INTERPRET=1) on small tree verifies: random trees (chains, branches, stars), requests of
different initial states (one with none: a negative index), varlen and fixed-width batches, two value heads
per q/k head. The oracle is a brute-force float64 recurrence along each root-to-node path
(gpu-harness/fp32_shim/fp32_gdn.step: the same gate, beta, l2-norm and scale conventions as sglang's kernel):
every node's output and cached state must match it. With the switch off, and for a linear verify, the
launcher keeps the wheel's serial kernel. Triton's compiler (no GPU needed) builds the kernel for the H200's
SM 9.0, which the interpreter does not check (loop-carried types, scalar casts).
"""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
triton = pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "gpu-harness" / "fp32_shim"))
import fp32_gdn as ref
from test_ddtree_patch import load_text, series_texts
from triton_sm90 import compile_in_child

REL = "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"
H, HV, K, V = 1, 2, 16, 16


@pytest.fixture(scope="module")
def text():
    if type(triton.language.zeros).__name__ != "InterpretedFunction":
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)")
    patched = series_texts([REL])[REL]
    assert "fused_gdn_tree_paths_kernel" in patched
    return patched


def load(text, tmp_path, name, paths):
    mod = load_text(text, tmp_path, name)
    mod._TREE_PATHS = {True: "1", False: "0"}.get(paths, paths)  # what SGLANG_GDN_TREE_PATHS sets at load
    return mod


def tree(kind, steps, rng):
    """Parents of tokens 0..steps-1 (token 0 the root; each parent before its child)."""
    if kind == "chain":
        return [0] + [j - 1 for j in range(1, steps)]
    if kind == "star":
        return [0] * steps
    return [0] + [j - 1 if rng.random() < 0.4 else rng.randrange(j) for j in range(1, steps)]


def verify_case(seed, kinds, steps, varlen=True, h0_index=(2, -1, 0)):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    n = len(kinds)
    tot = n * steps

    def rnd(*shape):
        return torch.randn(*shape, generator=gen)

    parents = torch.tensor([tree(kind, steps, rng) for kind in kinds], dtype=torch.int64)
    case = {"A_log": -torch.rand(HV, generator=gen), "a": rnd(tot, HV), "dt_bias": rnd(HV), "softplus_beta": 1.0,
            "softplus_threshold": 20.0, "q": rnd(1, tot, H, K), "k": rnd(1, tot, H, K), "v": rnd(1, tot, HV, V),
            "b": rnd(1, tot, HV), "initial_state_source": rnd(3, HV, V, K),
            "initial_state_indices": torch.tensor(h0_index[:n], dtype=torch.int32), "use_qk_l2norm_in_kernel": True,
            "disable_state_update": True, "intermediate_states_buffer": torch.zeros(n + 1, steps, HV, V, K),
            "intermediate_state_indices": torch.tensor(list(range(n, 0, -1)), dtype=torch.int32),
            "cache_steps": steps, "retrieve_parent_token": parents}  # fmt: skip
    if varlen:
        case["cu_seqlens"] = torch.arange(0, tot + 1, steps, dtype=torch.int32)
    else:  # the fixed-width form: [requests, steps, ...]
        for key in ("q", "k", "v", "b"):
            case[key] = case[key].reshape(n, steps, *case[key].shape[2:])
    return case


def brute_force(case):
    """Every node's output and state from its request's initial state along its root-to-node path."""
    steps = case["cache_steps"]
    parents = case["retrieve_parent_token"]
    q = ref.expand_heads(ref.l2norm(case["q"].reshape(-1, H, K).double()), HV)
    k = ref.expand_heads(ref.l2norm(case["k"].reshape(-1, H, K).double()), HV)
    v = case["v"].reshape(-1, HV, V).double()
    g = ref.gating(case["A_log"].double(), case["a"].double(), case["dt_bias"].double())
    beta = torch.sigmoid(case["b"].reshape(-1, HV).double())
    outs, states = torch.zeros(q.shape[0], HV, V, dtype=torch.float64), {}
    for n in range(parents.shape[0]):
        i0 = int(case["initial_state_indices"][n])
        for t in range(steps):
            path = [t]
            while path[-1] > 0:
                path.append(int(parents[n, path[-1]]))
            S = case["initial_state_source"][i0].double()[None] if i0 >= 0 else torch.zeros(1, HV, V, K, dtype=torch.float64)
            for j in reversed(path):
                r = n * steps + j
                o, S = ref.step(S, q[r : r + 1], k[r : r + 1], v[r : r + 1], g[r : r + 1], beta[r : r + 1], K**-0.5)
            outs[n * steps + t] = o[0]
            states[(n, t)] = S[0]
    return outs, states


def run(mod, case):
    args = {key: (val.clone() if isinstance(val, torch.Tensor) else val) for key, val in case.items()}
    out = mod.fused_sigmoid_gating_delta_rule_update(**args)
    return out, args["intermediate_states_buffer"]


@pytest.mark.parametrize(
    "seed,kinds,steps,varlen",
    [(1, ("random", "chain", "star"), 8, True), (2, ("random", "random"), 16, True), (3, ("random", "star"), 5, False)],
)
def test_every_node_is_its_root_to_node_recurrence(text, tmp_path, seed, kinds, steps, varlen):
    mod = load(text, tmp_path, f"gdn_paths_{seed}", paths=True)
    case = verify_case(seed, kinds, steps, varlen=varlen)
    out, cache = run(mod, case)
    want_o, want_s = brute_force(case)
    assert tuple(out.shape) == tuple(case["v"].shape)
    assert (out.reshape(-1, HV, V).double() - want_o).abs().max() < 1e-5
    for (n, t), state in want_s.items():
        slot = int(case["intermediate_state_indices"][n])
        assert (cache[slot, t].double() - state).abs().max() < 1e-5, (n, t)
    # the slot no request owns stays untouched
    used = {int(i) for i in case["intermediate_state_indices"]}
    assert all(cache[i].abs().max() == 0 for i in range(cache.shape[0]) if i not in used)


class Recorder:
    def __init__(self):
        self.grids = []

    def __getitem__(self, grid):
        self.grids.append(tuple(grid))
        return lambda *args, **kw: None


def test_the_switch_and_the_call_choose_the_kernel(text, tmp_path):
    case = verify_case(4, ("random", "chain"), 8)
    for paths, linear, want in ((True, False, "paths"), (False, False, "serial"), (True, True, "serial")):
        mod = load(text, tmp_path, f"gdn_choice_{paths}_{linear}", paths=paths)
        mod.fused_gdn_tree_paths_kernel, mod.fused_sigmoid_gating_delta_rule_update_kernel = Recorder(), Recorder()
        args = dict(case, retrieve_parent_token=None) if linear else case
        run(mod, args)
        launched = "paths" if mod.fused_gdn_tree_paths_kernel.grids else "serial"
        assert launched == want, (paths, linear)
    # one program per (value block, node, request x value head); 16-wide blocks (0108) over V = 16
    assert mod.fused_sigmoid_gating_delta_rule_update_kernel.grids == [(1, 1, 2 * HV)]
    paths_mod = load(text, tmp_path, "gdn_grid", paths=True)
    paths_mod.fused_gdn_tree_paths_kernel = Recorder()
    run(paths_mod, case)
    assert paths_mod.fused_gdn_tree_paths_kernel.grids == [(1, 8, 2 * HV)]


# the H200's per-layer times (us) of record 2026-12-03-ddtree-paths, call 1: (requests x value heads, tokens) ->
# (the wheel's kernel at 0108's block, 0109's)
H200 = {(16, 16): (24.0, 18.7), (16, 32): (50.7, 26.0), (64, 16): (38.7, 55.4), (64, 32): (77.1, 103.3),
        (48, 16): (35.6, 47.0), (48, 32): (68.9, 61.4), (192, 16): (76.3, 141.6), (192, 32): (152.6, 269.6)}  # fmt: skip


def test_auto_takes_the_tree_kernel_where_it_won_on_the_h200(text, tmp_path, monkeypatch):
    """auto (the default): node by node when requests x value heads <= 1.5 x verify tokens, which is where 0109
    was faster in every measured row."""
    mod = load_text(text, tmp_path, "gdn_auto_default")
    assert (mod._TREE_PATHS, mod._TREE_PATHS_PAIRS_PER_TOKEN) == ("auto", 1.5)
    for (pairs, tokens), (serial, paths) in H200.items():
        assert mod._tree_paths_for(pairs, 1, tokens) == (paths < serial), (pairs, tokens)
    for requests, want in ((2, "paths"), (3, "serial")):  # HV = 2, 8 tokens: 4 pairs <= 0.5 x 8, 6 > 4
        mod = load(text, tmp_path, f"gdn_auto_{requests}", paths="auto")
        mod._TREE_PATHS_PAIRS_PER_TOKEN = 0.5
        mod.fused_gdn_tree_paths_kernel, mod.fused_sigmoid_gating_delta_rule_update_kernel = Recorder(), Recorder()
        run(mod, verify_case(5, ("random",) * requests, 8))
        assert ("paths" if mod.fused_gdn_tree_paths_kernel.grids else "serial") == want, requests
    monkeypatch.setenv("SGLANG_GDN_TREE_PATHS", "yes")
    with pytest.raises(ValueError, match="SGLANG_GDN_TREE_PATHS must be 0, 1 or auto"):
        load_text(text, tmp_path, "gdn_auto_bad")


COMPILE = textwrap.dedent("""
    import importlib.util, json, sys
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile
    spec = importlib.util.spec_from_file_location("gdn_paths_compile", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    kernel = mod.fused_gdn_tree_paths_kernel
    scalars = {"softplus_beta": "fp32", "softplus_threshold": "fp32", "scale": "fp32", "cache_steps": "i32", "T": "i32"}
    pointers = {"A_log": "*fp32", "dt_bias": "*fp32", "h0_source": "*fp32", "intermediate_states_buffer": "*fp32",
                "h0_indices": "*i32", "cu_seqlens": "*i32", "intermediate_state_indices": "*i32", "parents_ptr": "*i64"}
    out = {"type": type(kernel).__name__}
    # the bench hybrid (16 value heads) at b15 and b31, Qwen3.6-27B's 48 value heads, varlen (the verify) and not
    for np2, hv, varlen in [(16, 16, True), (32, 16, True), (32, 48, True), (32, 48, False)]:
        consts = {"NP2_T": np2, "H": 16, "HV": hv, "K": 128, "V": 128, "BK": 128, "BV": 16,
                  "USE_QK_L2NORM_IN_KERNEL": True, "IS_VARLEN": varlen}
        names = kernel.arg_names
        signature = {n: "constexpr" if n in consts else scalars.get(n) or pointers.get(n)
                     or ("i32" if n.startswith("stride") else "*bf16") for n in names}
        src = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in consts.items()})
        done = triton_compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1, "num_stages": 3})
        out[f"{np2}/{hv}/{varlen}"] = [len(done.asm["cubin"]), ".target sm_90" in done.asm["ptx"]]
    print(json.dumps(out))
""")


def test_the_kernel_compiles_for_sm90(text, tmp_path):
    out = compile_in_child(COMPILE, text, tmp_path, "gdn_paths.py")
    assert out.pop("type") == "JITFunction"
    assert len(out) == 4 and all(size > 0 and sm90 for size, sm90 in out.values()), out
