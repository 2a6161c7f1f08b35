"""The DDTree build kernel (ddtree_device.build_tree_kernel, 0101's new file; wired in by 0107).

One Triton program per request runs the best-first pops that ``build_tree_device`` runs as ~8 torch
kernels per pop. Here Triton's CPU interpreter (TRITON_INTERPRET=1) runs the very kernel source on
CPU tensors, and every field is compared with the torch build (itself tested against the host
reference and brute force in test_ddtree_device.py) and with the host reference directly: tokens,
parents, depths, validity, ancestors, ranks, bit-identical float64 scores, node counts, depths,
positions, and the hybrid kernels' links (ddtree_hybrid.tree_retrieve_links). Cases: random
distributions, ties (flat rows, quantised log-probs), -inf log-probs, budgets 1..63, top-k 1..8,
batches, int32 and int64 token ids. Then TreeBuilder's choice of build, and Triton's compiler
building the kernel for the H200's SM 9.0 (no GPU needed), which the interpreter does not check.
"""

from __future__ import annotations

import math
import os
import random
import sys
import textwrap
from pathlib import Path

import pytest

# Triton decides at import whether its own library functions are interpreted: the interpreter needs the
# variable set before the first `import triton` of this process (tests/conftest.py sets it before torch's
# dynamo imports Triton; here for a run without that conftest).
os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")
triton = pytest.importorskip("triton", reason="triton is not installed: it is in the lock's dev group (uv sync)")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "gpu-harness"))
import ddtree_kernel_check as kernel_check
from test_ddtree_utils import PATCH, TARGET, load_from_patch, new_file_from_patch
from triton_sm90 import compile_in_child

INTERPRETED = type(triton.language.zeros).__name__ == "InterpretedFunction"

DEVICE_TARGET = "sglang/srt/speculative/ddtree_device.py"
HYBRID_TARGET = "sglang/srt/speculative/ddtree_hybrid.py"
FIELDS = ("tokens", "parents", "depths", "valid", "ancestors", "ranks", "scores", "num_nodes", "max_depth",
          "positions")  # fmt: skip


@pytest.fixture(scope="module")
def dd(tmp_path_factory):
    if not INTERPRETED:
        pytest.skip("triton was imported in this process before TRITON_INTERPRET=1 was set (tests/conftest.py sets it)")
    return load_from_patch(DEVICE_TARGET, "ddtree_device_kernel_test", tmp_path_factory.mktemp("kernel"))


@pytest.fixture(scope="module")
def du(tmp_path_factory):
    return load_from_patch(TARGET, "ddtree_utils_kernel_ref", tmp_path_factory.mktemp("kref"))


@pytest.fixture(scope="module")
def hy(tmp_path_factory):
    """ddtree_hybrid.py as the series installs it (0103 creates it)."""
    import importlib.util

    from test_ddtree_patch import series_texts

    path = tmp_path_factory.mktemp("khy") / "ddtree_hybrid.py"
    path.write_text(series_texts([HYBRID_TARGET])[HYBRID_TARGET], encoding="utf-8")
    spec = importlib.util.spec_from_file_location("ddtree_hybrid_kernel_ref", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def draft(rng, bs, depth_count, kk, kind):
    """gpu-harness/ddtree_kernel_check.py's drafts (the GPU check runs the same kinds), log-probs as each
    kind makes them (float64; float32 quantised), token ids int32 or int64."""
    return kernel_check.draft(rng, bs, depth_count, kk, kind, lp_dtype=None,
                              id_dtype=rng.choice([torch.int32, torch.int64]))  # fmt: skip


def assert_kernel_equals_torch(dd, hy, lp, ids, budget, topk, roots=None, prefix=None):
    bs = lp.shape[0]
    roots = torch.arange(900, 900 + bs) if roots is None else roots
    prefix = torch.arange(bs) * 3 + 5 if prefix is None else prefix
    want = dd.build_tree_device(lp, ids, roots, budget, topk, prefix)
    got = dd.build_tree_kernel(lp, ids, roots, budget, topk, prefix, links=True)
    for name in FIELDS:
        a, b = getattr(want, name), getattr(got, name)
        assert a.dtype == b.dtype and torch.equal(a, b), (name, budget, topk, tuple(lp.shape))
    first, sibling = hy.tree_retrieve_links(want.parents)
    assert torch.equal(got.next_token, first) and torch.equal(got.next_sibling, sibling)
    return got


@pytest.mark.parametrize("kind", ["random", "flat", "quantised", "neginf"])
def test_the_kernel_builds_the_torch_build_s_trees(dd, hy, kind):
    rng = random.Random(f"kernel-{kind}")
    for budget, topk, depth_count, kk in [(1, 1, 1, 1), (15, 8, 15, 8), (31, 8, 31, 8), (7, 2, 3, 4),
                                          (63, 8, 15, 8), (31, 1, 15, 8), (15, 8, 4, 2)]:  # fmt: skip
        bs = rng.choice([1, 2, 4])
        lp, ids = draft(rng, bs, depth_count, kk, kind)
        assert_kernel_equals_torch(dd, hy, lp, ids, budget, topk)


def test_the_kernel_equals_the_host_reference_slot_by_slot(dd, du):
    """Straight against the definition (ddtree_utils.build_tree_batch), the oracle-like profile
    included: every depth's log-probs [a, b, ...] make (rank 1, rank 0) and (rank 0, rank 1) tie."""
    rng = random.Random("kernel-ref")
    cases = [draft(rng, 3, 15, 8, "random"), draft(rng, 2, 6, 4, "quantised")]
    profile = torch.tensor([math.log(0.6), math.log(0.25), math.log(0.1), math.log(0.05)], dtype=torch.float64)
    cases.append((profile.expand(2, 5, 4).contiguous(), torch.arange(40).view(2, 5, 4)))
    for lp, ids in cases:
        bs = lp.shape[0]
        roots = list(range(40, 40 + bs))
        for budget, topk in [(15, 8), (31, 4), (3, 2)]:
            ref = du.build_tree_batch(roots, lp, ids, budget, topk)
            got = dd.build_tree_kernel(lp, ids, torch.tensor(roots), budget, topk)
            for name in ("tokens", "parents", "depths", "valid", "ancestors"):
                assert torch.equal(getattr(got, name), getattr(ref, name)), (name, budget, topk)
            assert got.num_nodes.tolist() == ref.num_nodes
            for b, nodes in enumerate(ref.nodes):
                n = len(nodes)
                assert got.ranks[b, 1 : n + 1].tolist() == nodes.ranks
                assert got.scores[b, 1 : n + 1].tolist() == nodes.scores


def test_an_empty_tree_and_a_short_one_are_padded_like_the_reference(dd, hy):
    lp = torch.tensor([[[float("-inf"), float("-inf")]], [[-0.5, float("-inf")]]], dtype=torch.float64)
    ids = torch.tensor([[[7, 8]], [[9, 10]]])
    got = assert_kernel_equals_torch(dd, hy, lp, ids, 4, 2, roots=torch.tensor([1, 2]))
    assert got.num_nodes.tolist() == [0, 1] and got.max_depth.tolist() == [0, 1]
    assert got.tokens.tolist() == [[1, 1, 1, 1, 1], [2, 9, 2, 2, 2]]
    assert got.parents.tolist() == [[-1] * 5, [-1, 0, -1, -1, -1]]


def test_tree_builder_takes_the_kernel_for_trees_only_where_it_can_run(dd, monkeypatch):
    rng = random.Random("builder")
    lp, ids = draft(rng, 2, 15, 8, "random")
    roots, prefix = torch.tensor([3, 4]), torch.tensor([10, 20])
    calls = []
    real = dd.build_tree_kernel
    monkeypatch.setattr(dd, "build_tree_kernel", lambda *a, **k: calls.append(k) or real(*a, **k))
    links = lambda parents: (parents.to(torch.int32), parents.to(torch.int32))
    built = dd.TreeBuilder(15, use_graphs=False, kernel=True, links=links).build(lp, ids, roots, prefix, 8)
    assert calls == [{"links": True}]
    want = dd.build_tree_device(lp, ids, roots, 15, 8, prefix)
    assert torch.equal(built.ancestors, want.ancestors) and built.mask_index is not None
    assert not torch.equal(built.next_token, want.parents.to(torch.int32))  # the kernel's links, not the callable's
    # a chain (shadow-linear), a width past 64 and kernel=False take the torch builds
    dd.TreeBuilder(15, use_graphs=False, kernel=True).build(lp, ids, roots, prefix, 8, linear=True)
    wide = dd.TreeBuilder(64, use_graphs=False, kernel=True).build(lp, ids, roots, prefix, 8)
    dd.TreeBuilder(15, use_graphs=False).build(lp, ids, roots, prefix, 8)
    assert len(calls) == 1 and wide.width == 65
    assert not dd.build_kernel_usable("cpu", 65) and dd.build_kernel_usable("cpu", 64)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not dd.build_kernel_usable("cpu", 16)  # on the CPU only Triton's interpreter runs it


def test_a_kernel_that_fails_falls_back_to_the_torch_build_once_and_for_all(dd, monkeypatch, caplog):
    rng = random.Random("fallback")
    lp, ids = draft(rng, 2, 15, 8, "random")
    roots, prefix = torch.tensor([3, 4]), torch.tensor([10, 20])
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(dd, "build_tree_kernel", broken)
    builder = dd.TreeBuilder(15, use_graphs=False, kernel=True)
    with caplog.at_level("WARNING"):
        first = builder.build(lp, ids, roots, prefix, 8)
        second = builder.build(lp, ids, roots, prefix, 8)
    want = dd.build_tree_device(lp, ids, roots, 15, 8, prefix)
    for tree in (first, second):
        assert all(torch.equal(getattr(tree, n), getattr(want, n)) for n in FIELDS)
    assert calls == [1] and builder.kernel is False
    assert [r.getMessage() for r in caplog.records if "build kernel failed" in r.getMessage()] == [
        (
            "DDTREE tree build kernel failed (no kernel image is available for execution on the device); "
            "building with torch ops from now on."
        )
    ]


COMPILE = textwrap.dedent("""
    import importlib.util, json, sys
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile as triton_compile
    spec = importlib.util.spec_from_file_location("ddtree_device_compile", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    kernel = mod._best_first_kernel()
    types = {"lp_ptr": "*fp64", "score_ptr": "*fp64", "valid_ptr": "*i1", "anc_ptr": "*i1", "first_ptr": "*i32",
             "sib_ptr": "*i32"}
    out = {"type": type(kernel).__name__}
    for budget, depth_count, topk in [(15, 15, 8), (31, 31, 8), (63, 15, 4)]:
        consts = {"D": depth_count, "K": 8, "WIDTH": topk, "BUDGET": budget, "R": mod._pow2(2 * budget + 1),
                  "WP": mod._pow2(budget + 1), "VMIN": mod.VALID_MIN, "NEG": mod.LPNEG}
        names = kernel.arg_names
        signature = {n: "constexpr" if n in consts else types.get(n, "*i64") for n in names}
        src = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(n),): v for n, v in consts.items()})
        done = triton_compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
        out[budget] = [len(done.asm["cubin"]), ".target sm_90" in done.asm["ptx"]]
    print(json.dumps(out))
""")


def test_the_kernel_compiles_for_sm90(tmp_path):
    """Triton's compiler (no GPU needed) takes the kernel to SM 9.0 machine code at the budgets the
    benchmarks run: what the interpreter does not check (types of loop-carried values, scalar casts)."""
    out = compile_in_child(COMPILE, new_file_from_patch(PATCH, DEVICE_TARGET), tmp_path, "ddtree_device.py")
    assert out.pop("type") == "JITFunction"
    assert all(size > 0 and sm90 for size, sm90 in out.values()), out
