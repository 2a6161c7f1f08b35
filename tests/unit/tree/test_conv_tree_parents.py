"""Patch 0110: DDTREE's conv update from the tree's parents (causal_conv1d_update_tree_parents).

The patched mamba/causal_conv1d_triton.py runs here under Triton's CPU interpreter (tests/conftest.py sets
TRITON_INTERPRET=1). Oracle one: the wheel's own tree path in the same file (causal_conv1d_update with
first-child / next-sibling links), on the same inputs: outputs, cached windows, the rolled conv state and the
parents it derives must equal the new kernel's bit for bit (the parents the new kernel is given are that
array). Oracle two, independent of both kernels: a float64 convolution along every token's root-to-token path
(past the root, the request's conv-state columns). Cases: random trees, chains, stars, padding slots, a padded
request (cache index -1), conv widths 2-4, bias and SiLU on and off, channels not a multiple of the block, a
conv-state pool whose lines the requests pick out of order. Then the dispatch in the GDN backend and the
metadata that hands the parents over, and the kernel compiled for SM 9.0 by Triton's compiler (no GPU).
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
sys.path.insert(0, str(HERE.parents[2] / "gpu-harness"))
from conv_tree_check import links  # first child / next sibling per slot, as DDTREE hands them to sglang
from test_ddtree_patch import load_text, series_texts
from triton_sm90 import compile_in_child

REL = "sglang/srt/layers/attention/mamba/causal_conv1d_triton.py"
GDN = "sglang/srt/layers/attention/linear/gdn_backend.py"
HYBRID = "sglang/srt/layers/attention/hybrid_linear_attn_backend.py"
WORKER = "sglang/srt/speculative/ddtree_worker.py"


@pytest.fixture(scope="module")
def texts():
    return series_texts([REL, GDN, HYBRID, WORKER])


@pytest.fixture(scope="module")
def mod(texts, tmp_path_factory):
    if type(triton.language.zeros).__name__ != "InterpretedFunction":
        pytest.skip("triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)")
    assert "_causal_conv1d_tree_parents_kernel" in texts[REL]
    return load_text(texts[REL], tmp_path_factory.mktemp("conv"), "conv_tree_parents")


def tree(kind, nodes, width, rng):
    """Parent slot of each of `width` slots (-1 root and padding), `nodes` real slots, parents before children."""
    parents = [-1] * width
    for j in range(1, nodes):
        parents[j] = {"chain": j - 1, "star": 0}.get(kind, j - 1 if rng.random() < 0.4 else rng.randrange(j))
    return parents


def case(seed, kinds, width, nodes=None, conv_width=4, dim=40, bias=True, act="silu", indices=None, dtype=torch.float32):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    batch = len(kinds)
    nodes = nodes or [width] * batch
    parents = [tree(kind, n, width, rng) for kind, n in zip(kinds, nodes)]
    lk = [links(p) for p in parents]
    lines = batch + 2
    return {
        # x as the GDN backend hands it over: [batch, dim, seqlen], a transposed view of [batch, seqlen, dim]
        "x": torch.randn(batch, width, dim, generator=gen).to(dtype).transpose(1, 2),
        "weight": torch.randn(dim, conv_width, generator=gen).to(dtype),
        "bias": torch.randn(dim, generator=gen).to(dtype) if bias else None,
        "activation": act,
        # the pool's conv state: [lines, dim, K - 1] with channels contiguous
        "conv_state": torch.randn(lines, conv_width - 1, dim, generator=gen).to(dtype).transpose(1, 2),
        "conv_state_indices": torch.tensor(indices or list(range(lines - 1, lines - 1 - batch, -1)), dtype=torch.int32),
        "intermediate_conv_window": torch.zeros(lines, width, dim, conv_width - 1, dtype=dtype),
        "intermediate_state_indices": torch.tensor(list(range(batch)), dtype=torch.int32),
        "next": torch.tensor([n for n, _ in lk], dtype=torch.int32),
        "sibling": torch.tensor([s for _, s in lk], dtype=torch.int32),
        "parents": torch.tensor(parents, dtype=torch.int64),
    }


def clone(c):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in c.items()}


def common(c):
    keys = ("conv_state", "weight", "bias", "activation", "conv_state_indices", "intermediate_conv_window", "intermediate_state_indices")
    return {k: c[k] for k in keys}


def run_wheel(mod, c):
    c = clone(c)
    derived = torch.full_like(c["next"], 77)
    out = mod.causal_conv1d_update(c["x"], retrieve_next_token=c["next"], retrieve_next_sibling=c["sibling"],
                                   retrieve_parent_token=derived, **common(c))  # fmt: skip
    return out, c["conv_state"], c["intermediate_conv_window"], derived


def run_parents(mod, c, block_n=16):
    c = clone(c)
    given = c["parents"].clamp(min=0).to(torch.int32)
    out = mod.causal_conv1d_update_tree_parents(c["x"], retrieve_parent_token=given, block_n=block_n, **common(c))
    return out, c["conv_state"], c["intermediate_conv_window"], given


def brute_force(c):
    """Each token's conv along its root-to-token path, float64: outputs [batch, dim, W] and windows (a padding
    slot's parent is the root, as in sglang's kernel; its window is never committed)."""
    x, w, conv_state = c["x"].double(), c["weight"].double(), c["conv_state"].double()
    batch, dim, width = x.shape
    kw = w.shape[1]
    out = torch.zeros(batch, dim, width, dtype=torch.float64)
    windows = {}
    for b in range(batch):
        line = int(c["conv_state_indices"][b])
        for t in range(width):
            chain, v = [], t  # ancestors: the token, its parent, ...; past the root the state's columns
            for _ in range(kw):
                chain.append(x[b, :, v] if v >= 0 else conv_state[line, :, kw - 1 + v])
                v = max(int(c["parents"][b, v]), 0) if v > 0 else v - 1  # padding hangs off the root
            acc = c["bias"].double().clone() if c["bias"] is not None else torch.zeros(dim, dtype=torch.float64)
            for j, col in enumerate(chain):
                acc = acc + col * w[:, kw - 1 - j]
            out[b, :, t] = acc * torch.sigmoid(acc) if c["activation"] == "silu" else acc
            windows[(b, t)] = torch.stack(chain[: kw - 1][::-1], dim=-1)  # slot kw - 2 - j holds ancestor j
    return out, windows


CASES = [
    {"seed": 1, "kinds": ("random", "chain", "star"), "width": 8},
    {"seed": 2, "kinds": ("random", "random"), "width": 16, "nodes": [11, 16]},  # padding slots in request 0
    {"seed": 3, "kinds": ("random",), "width": 5, "conv_width": 3, "bias": False, "act": None, "dim": 37},
    {"seed": 4, "kinds": ("chain", "random"), "width": 4, "conv_width": 2},
    {"seed": 5, "kinds": ("random", "random", "random"), "width": 32, "dim": 24, "indices": [0, -1, 3]},  # a padded request
]


@pytest.mark.parametrize("spec", CASES, ids=[f"seed{c['seed']}" for c in CASES])
def test_equals_the_wheels_tree_path_bit_for_bit(mod, spec):
    c = case(**spec)
    out_w, state_w, win_w, derived = run_wheel(mod, c)
    out_p, state_p, win_p, given = run_parents(mod, c)
    live = c["conv_state_indices"] >= 0
    # the array the new kernel is given is the one the wheel's kernel derives from the links
    assert torch.equal(derived[live], given[live])
    assert torch.equal(out_w[live], out_p[live])
    assert torch.equal(win_w, win_p)
    assert torch.equal(state_w, state_p)
    assert not torch.equal(state_p, c["conv_state"])  # the roll happened


@pytest.mark.parametrize("spec", CASES[:4], ids=[f"seed{c['seed']}" for c in CASES[:4]])
def test_every_token_is_its_root_to_token_convolution(mod, spec):
    c = case(**spec)
    out, state, win, _ = run_parents(mod, c, block_n=32)
    want, windows = brute_force(c)
    assert (out.double() - want).abs().max() < 1e-4
    batch, width = c["x"].shape[0], c["x"].shape[2]
    for b in range(batch):
        slot = int(c["intermediate_state_indices"][b])
        for t in range(width):
            assert torch.equal(win[slot, t].double(), windows[(b, t)]), (b, t)
    # the rolled state is the last K - 1 tokens in slot order, as the wheel leaves it before the commit
    kw = c["weight"].shape[1]
    for b in range(batch):
        line = int(c["conv_state_indices"][b])
        assert torch.equal(state[line], c["x"][b, :, width - (kw - 1):])


def test_a_wrong_parent_fails_both_oracles(mod):
    c = case(seed=6, kinds=("random", "random"), width=12)
    wrong = clone(c)
    wrong["parents"] = torch.where(c["parents"] > 0, c["parents"] - 1, c["parents"])  # each node's parent one slot early
    assert not torch.equal(wrong["parents"], c["parents"])
    out_w = run_wheel(mod, c)[0]
    out_p = run_parents(mod, wrong)[0]
    assert not torch.equal(out_w, out_p)
    assert (out_p.double() - brute_force(c)[0]).abs().max() > 1e-2


def test_the_wrapper_refuses_a_mismatched_parent_array(mod):
    c = case(seed=7, kinds=("random",), width=8)
    with pytest.raises(ValueError, match="retrieve_parent_token has shape"):
        mod.causal_conv1d_update_tree_parents(c["x"], retrieve_parent_token=torch.zeros(1, 7, dtype=torch.int32), **common(c))


def test_the_block_size_switch_is_checked_when_the_module_loads(texts, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_CONV_BLOCK_N", "48")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_CONV_BLOCK_N must be"):
        load_text(texts[REL], tmp_path, "conv_block_48")
    monkeypatch.setenv("SGLANG_DDTREE_CONV_BLOCK_N", "128")
    assert load_text(texts[REL], tmp_path, "conv_block_128").TREE_PARENTS_BLOCK_N == 128


def test_the_switch_off_always_or_where_it_won_on_the_h200(texts, tmp_path, monkeypatch):
    """SGLANG_DDTREE_CONV_PARENTS: 0 (default) never; 1 always; auto where the H200 sweep had it faster
    (record 2026-12-03-ddtree-paths, call 7: batch x tokens <= 16); anything else refused at load."""
    # (batch, tokens) -> faster than sglang's tree path on the H200 at both 6144 and 10240 channels
    h200 = {(1, 16): True, (1, 32): False, (4, 16): False, (4, 32): False}
    for mode, want in (("0", lambda b, t: False), ("1", lambda b, t: True), ("auto", lambda b, t: h200[(b, t)])):
        monkeypatch.setenv("SGLANG_DDTREE_CONV_PARENTS", mode)
        mod = load_text(texts[REL], tmp_path, f"conv_mode_{mode}")
        assert all(mod.tree_parents_for(b, t) == want(b, t) for b, t in h200), mode
    monkeypatch.delenv("SGLANG_DDTREE_CONV_PARENTS")
    assert load_text(texts[REL], tmp_path, "conv_mode_default").TREE_PARENTS_MODE == "0"
    monkeypatch.setenv("SGLANG_DDTREE_CONV_PARENTS", "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_CONV_PARENTS must be 0, 1 or auto"):
        load_text(texts[REL], tmp_path, "conv_mode_bad")


def test_the_switch_wires_worker_metadata_and_dispatch(texts):
    """What SGLANG_DDTREE_CONV_PARENTS=1 changes, read from the patched sources (they need sglang to import)."""
    hybrid, gdn, worker = texts[HYBRID], texts[GDN], texts[WORKER]
    # the backend reads the switch only for DDTREE tree mode, and is off otherwise
    assert 'self.conv_tree_parents = False' in hybrid
    tree_block = hybrid.split('speculative_ddtree_mode", "tree") == "tree"', 1)[1].split("self.req_to_token_pool", 1)[0]
    assert 'self.conv_tree_parents = TREE_PARENTS_MODE != "0"' in tree_block
    # both metadata paths (eager and graph replay) fill retrieve_parent_token from the given parents
    assert hybrid.count("self._given_tree_parents(") == 2
    assert "self.retrieve_parent_token_list[bs - 1][:bs_without_pad].copy_(" in hybrid
    # the GDN verify dispatches on the switch and a tree verify
    assert "and retrieve_next_token is not None\n                and tree_parents_for(batch_size, draft_token_num)\n" in gdn
    assert "conv_update = causal_conv1d_update_tree_parents" in gdn
    # the worker hands over the array the wheel's kernel would derive (root and padding -> 0)
    assert "verify_input.tree_parent_token = tree.parents.clamp(min=0).to(torch.int32)" in worker


COMPILE = textwrap.dedent("""
    import importlib.util, json, sys
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile
    spec = importlib.util.spec_from_file_location("conv_parents_compile", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    kernel = mod._causal_conv1d_tree_parents_kernel
    pointers = {"conv_state_indices_ptr": "*i32", "intermediate_state_indices_ptr": "*i32", "parent_ptr": "*i32"}
    out = {"type": type(kernel).__name__}
    # b15 and b31 widths at the bench hybrid's conv channels and Qwen3.6-27B's, blocks 64 and 256
    for seqlen, dim, block in [(16, 6144, 64), (32, 6144, 64), (32, 10240, 256)]:
        consts = {"dim": dim, "seqlen": seqlen, "state_len": 3, "num_cache_lines": 64,
                  "stride_x_seq": seqlen * dim, "stride_x_dim": 1, "stride_x_token": dim, "stride_w_dim": 4,
                  "stride_w_width": 1, "stride_conv_state_seq": 3 * dim, "stride_conv_state_dim": 1,
                  "stride_conv_state_tok": dim, "stride_state_indices": 1, "stride_inter_seq": seqlen * dim * 3,
                  "stride_inter_step": dim * 3, "stride_inter_dim": 3, "stride_inter_win": 1,
                  "stride_intermediate_state_indices": 1, "stride_parent_seq": seqlen, "stride_parent_token": 1,
                  "stride_o_seq": seqlen * dim, "stride_o_dim": 1, "stride_o_token": dim, "pad_slot_id": -1,
                  "HAS_BIAS": False, "KERNEL_WIDTH": 4, "SILU_ACTIVATION": True, "NP2_STATELEN": 4,
                  "NP2_SEQLEN": seqlen, "BLOCK_N": block}
        names = kernel.arg_names
        signature = {n: "constexpr" if n in consts else ("i32" if n == "batch" else pointers.get(n, "*bf16")) for n in names}
        src = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in consts.items()})
        done = triton_compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
        out[f"{seqlen}/{dim}/{block}"] = [len(done.asm["cubin"]), ".target sm_90" in done.asm["ptx"],
                                          done.asm["ptx"].count("bar.sync")]
    print(json.dumps(out))
""")


def test_the_kernel_compiles_for_sm90_with_the_reads_before_the_roll(texts, tmp_path):
    """The warps of one program read the old conv-state columns that the roll at the end overwrites: without
    the barrier between them the H200 gave wrong outputs now and then (batch 4, gpu-harness/records/
    2026-12-03-ddtree-paths/ call 1), which the interpreter (one thread) cannot show. So: the barrier is in the
    compiled code, one more than the same kernel without it."""
    out = compile_in_child(COMPILE, texts[REL], tmp_path, "conv_parents.py")
    assert out.pop("type") == "JITFunction"
    assert len(out) == 3 and all(size > 0 and sm90 for size, sm90, _ in out.values()), out
    barrier = "    tl.debug_barrier()\n    cols = tl.arange(0, NP2_STATELEN)"
    assert texts[REL].count(barrier) == 1
    without = compile_in_child(COMPILE, texts[REL].replace(barrier, "    cols = tl.arange(0, NP2_STATELEN)"), tmp_path, "conv_nobar.py")
    without.pop("type")
    assert all(out[key][2] == without[key][2] + 1 for key in out), (out, without)
