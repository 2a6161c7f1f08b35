"""DDTree on the device (ddtree_device.py from files/patches/sglang/0.5.11/0101-ddtree-utils.patch).

The device tree build, mask, walk, commit indexes and oracle against the host reference
(ddtree_utils.py, the same patch) and brute force, on CPU torch: random distributions, ties
(flat rows, the oracle's repeated profile, quantised logits, log-prob 0, -inf), budgets 1..31 and
top-k 1..8, batches, padding. And that the device code never reads a tensor value on the host
and has fixed shapes: it runs on the meta device (where any value read fails), it compiles as one
graph (torch.compile fullgraph), and it dispatches the same operators for any input values.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_ddtree_utils import TARGET, brute_force, load_from_patch

DEVICE_TARGET = "sglang/srt/speculative/ddtree_device.py"


@pytest.fixture(scope="module")
def du(tmp_path_factory):
    return load_from_patch(TARGET, "ddtree_utils_ref", tmp_path_factory.mktemp("ref"))


@pytest.fixture(scope="module")
def dd(tmp_path_factory):
    return load_from_patch(DEVICE_TARGET, "ddtree_device_under_test", tmp_path_factory.mktemp("device"))


L = math.log
FIELDS = ("tokens", "parents", "depths", "valid", "ancestors")


def assert_same_trees(du, dd, lp, tk, budget, topk, roots=None):
    """Device build == reference build: every slot's token, parent, depth, rank, score, padding."""
    bs = lp.shape[0]
    roots = list(range(900, 900 + bs)) if roots is None else roots
    ref = du.build_tree_batch(roots, lp, tk, budget, topk)
    prefix = torch.arange(bs) * 3 + 5
    dev = dd.build_tree_device(lp, tk, torch.tensor(roots), budget, topk, prefix)
    for name in FIELDS:
        assert torch.equal(getattr(dev, name), getattr(ref, name)), (name, budget, topk)
    assert dev.num_nodes.tolist() == ref.num_nodes
    assert torch.equal(dev.positions, du.tree_positions(ref.depths, prefix))
    for b, nodes in enumerate(ref.nodes):
        n = len(nodes)
        assert dev.ranks[b, 1 : n + 1].tolist() == nodes.ranks
        assert dev.scores[b, 1 : n + 1].tolist() == nodes.scores  # bit-identical float64 sums
        assert int(dev.max_depth[b]) == (max(nodes.depths) if n else 0)
    return ref, dev


def random_topk(g, bs, depth, k, scale=2.0, vocab=60):
    logits = torch.randn(bs, depth, vocab, generator=g) * scale
    top = torch.log_softmax(logits, -1).topk(k, -1)
    return top.values, top.indices


# ---------------------------------------------------------------- the build against the reference


def test_every_budget_and_topk_on_random_batches(du, dd):
    g = torch.Generator().manual_seed(0)
    pairs = [(b, 1 + b % 8) for b in range(1, 32)] + [(b, k) for b in (1, 7, 15, 31) for k in range(1, 9)]
    for budget, topk in pairs:
        depth = 1 + (budget * 7 + topk) % 15
        lp, tk = random_topk(g, 3, depth, topk)
        assert_same_trees(du, dd, lp, tk, budget, topk)


def test_random_sets_match_brute_force(du, dd):
    g = torch.Generator().manual_seed(1)
    for _ in range(25):
        lp, tk = random_topk(g, 1, 4, 3, scale=3.0)
        budget = int(torch.randint(1, 40, (1,), generator=g))
        _, dev = assert_same_trees(du, dd, lp, tk, budget, 3)
        want = sorted(p for _, p in brute_force(lp[0].tolist(), tk[0].tolist(), budget, 3))
        got = []
        for s in range(1, int(dev.num_nodes[0]) + 1):
            path, q = [], s
            while q > 0:
                path.append(int(dev.tokens[0, q]))
                q = int(dev.parents[0, q])
            got.append(tuple(reversed(path)))
        assert sorted(got) == want


@pytest.mark.parametrize("a,b,first", [(0.8, 0.1, (0, 1)), (0.5, 0.45, (1, 0))])
def test_tie_between_branches_is_broken_as_the_heap_does(du, dd, a, b, first):
    """Both depths have log-probs [log a, log b]: the rank paths (1, 0) and (0, 1) score exactly
    the same and the budget (4) takes only one of them. The heap pops the one pushed first:
    (0, 1) is pushed when (0, 0) pops, (1, 0) when (1) pops; so (0, 1) wins iff a * a > b. A
    top-B beam with a fixed tie rule cannot do both."""
    lp = torch.tensor([[[L(a), L(b)]] * 2])
    tk = torch.tensor([[[10, 11], [20, 21]]])
    _, dev = assert_same_trees(du, dd, lp, tk, budget=4, topk=2)
    paths = {(0, 1): [10, 21], (1, 0): [11, 20]}
    got = [[int(dev.tokens[0, q]) for q in (int(dev.parents[0, s]), s) if q > 0] for s in range(1, 5)]
    other = (1, 0) if first == (0, 1) else (0, 1)
    assert paths[first] in got and paths[other] not in got


def test_ties_flat_rows_zero_logprobs_and_minus_inf(du, dd):
    g = torch.Generator().manual_seed(2)
    random.seed(2)
    for trial in range(120):
        bs, depth, k = random.randint(1, 3), random.randint(1, 9), random.randint(1, 8)
        kind = trial % 5
        if kind == 0:  # every rank equally likely
            lp = torch.full((bs, depth, k), L(1 / k))
        elif kind == 1:  # the oracle's profile at every depth
            lp = torch.tensor(du.DEFAULT_ORACLE_PROFILE[:k]).expand(bs, depth, k).clone()
        elif kind == 2:  # bf16-like logits: many exact ties in the top-k
            lp = torch.log_softmax((torch.randn(bs, depth, 40, generator=g) * 2).round(), -1).topk(k, -1).values
        elif kind == 3:  # fully confident depths (log-prob exactly 0): children tie their parents
            lp = torch.full((bs, depth, k), -30.0)
            lp[:, :, 0] = 0.0
            lp[:, 1::2] = L(1 / k)
        else:  # masked vocabulary: -inf past a few ranks, a row with none at all
            lp = torch.log_softmax(torch.randn(bs, depth, 40, generator=g), -1).topk(k, -1).values
            lp[:, :, 1 + trial % 3 :] = float("-inf")
            if depth > 2:
                lp[:, depth - 1, :] = float("-inf")
        tk = torch.stack([torch.randperm(100, generator=g)[:k] for _ in range(bs * depth)]).view(bs, depth, k)
        assert_same_trees(du, dd, lp, tk, random.randint(1, 31), random.randint(1, 8))


def test_topk_below_and_above_the_rows_width(du, dd):
    g = torch.Generator().manual_seed(3)
    lp, tk = random_topk(g, 2, 6, 5)
    for topk in (1, 3, 5, 8):  # only the first min(topk, K) ranks are children
        assert_same_trees(du, dd, lp, tk, 20, topk)


def test_padding_layout_short_blocks_and_empty_trees(du, dd):
    lp = torch.tensor([[[L(0.6), L(0.4)], [L(0.9), L(0.1)]], [[float("-inf")] * 2, [float("-inf")] * 2]])
    tk = torch.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])
    _, dev = assert_same_trees(du, dd, lp, tk, budget=9, topk=2, roots=[40, 41])
    assert dev.num_nodes.tolist() == [6, 0]  # 2 + 4 nodes exist; nothing in a -inf block
    assert dev.tokens[1].tolist() == [41] * 10 and dev.parents[1].tolist() == [-1] * 10
    assert dev.valid[0].tolist() == [True] * 7 + [False] * 3
    assert dev.ancestors[0, 8].tolist() == [k == 8 for k in range(10)]  # padding sees itself only


def test_chain_is_the_reference_chain(du, dd):
    g = torch.Generator().manual_seed(4)
    lp, tk = random_topk(g, 2, 5, 3)
    for budget in (1, 3, 5, 9):
        ref = du.build_tree_batch([7, 8], lp, tk, budget, 3, linear=True)
        dev = dd.build_chain_device(tk, torch.tensor([7, 8]), budget, torch.tensor([4, 0]))
        for name in FIELDS:
            assert torch.equal(getattr(dev, name), getattr(ref, name)), name
        assert torch.equal(dev.positions, du.tree_positions(ref.depths, torch.tensor([4, 0])))


def test_reference_batch_converts_to_the_same_device_tree(du, dd):
    g = torch.Generator().manual_seed(5)
    lp, tk = random_topk(g, 3, 7, 4)
    ref = du.build_tree_batch([1, 2, 3], lp, tk, 15, 4)
    conv = dd.device_tree_from_batch(ref, "cpu", torch.tensor([3, 4, 5]))
    dev = dd.build_tree_device(lp, tk, torch.tensor([1, 2, 3]), 15, 4, torch.tensor([3, 4, 5]))
    for name in (*FIELDS, "ranks", "scores", "num_nodes", "max_depth", "positions"):
        assert torch.equal(getattr(conv, name), getattr(dev, name)), name


def test_tree_builder_without_cuda_runs_the_build(du, dd):
    g = torch.Generator().manual_seed(6)
    lp, tk = random_topk(g, 2, 6, 4)
    builder = dd.TreeBuilder(11)
    out = builder.build(lp, tk, torch.tensor([1, 2]), torch.tensor([9, 9]), 4)
    want = dd.build_tree_device(lp, tk, torch.tensor([1, 2]), 11, 4, torch.tensor([9, 9]))
    assert torch.equal(out.tokens, want.tokens) and not builder._graphs  # no graph on CPU
    chain = builder.build(lp, tk, torch.tensor([1, 2]), torch.tensor([9, 9]), 4, linear=True)
    assert chain.num_nodes.tolist() == [6, 6]
    assert out.next_token is None and chain.next_sibling is None  # no links asked for
    assert torch.equal(out.mask_index, dd.tree_mask_index(torch.tensor([9, 9]), 12))  # made with the tree


def test_builder_walk_is_accept_and_fetch_without_a_captured_build(du, dd):
    """TreeBuilder.walk (what verify calls since 0105): on CPU, or for a tree no captured build made,
    or with walk graphs off, the eager walk; same host lists and device tensors as accept_and_fetch."""
    g = torch.Generator().manual_seed(10)
    lp, tk = random_topk(g, 3, 6, 4)
    for walk_graphs in (False, True):
        builder = dd.TreeBuilder(13, walk_graphs=walk_graphs)
        tree = builder.build(lp, tk, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), 4)
        predict = tree.tokens.roll(-1, dims=1)
        got, want = builder.walk(tree, predict), dd.accept_and_fetch(tree, predict)
        assert (got.paths, got.accepted_tokens, got.bonus, got.num_nodes) == (
            want.paths, want.accepted_tokens, want.bonus, want.num_nodes)  # fmt: skip
        assert torch.equal(got.path_dev, want.path_dev) and not builder._walks
    path, lens, bonus, packed = dd.accept_packed(tree, predict)
    assert packed.shape == (3, 2 * 14 + 3) and dd.fetch_accept(path, lens, bonus, packed).paths == want.paths


def test_tree_builder_makes_the_links_with_the_tree(dd):
    """TreeBuilder(links=f) runs f on the built tree's parents inside the same build (the graph on
    CUDA): hybrid targets get their kernel links without eager kernels of their own."""
    g = torch.Generator().manual_seed(9)
    lp, tk = random_topk(g, 2, 6, 4)
    seen = []

    def links(parents):
        seen.append(parents)
        return parents + 1, parents - 1

    out = dd.TreeBuilder(11, links=links).build(lp, tk, torch.tensor([1, 2]), torch.tensor([9, 9]), 4)
    assert len(seen) == 1 and seen[0] is out.parents
    assert torch.equal(out.next_token, out.parents + 1) and torch.equal(out.next_sibling, out.parents - 1)


# ---------------------------------------------------------------- mask, walk, commit


def test_mask_walk_and_commit_indexes_match_the_reference(du, dd):
    g = torch.Generator().manual_seed(7)
    rng = random.Random(7)
    for _ in range(60):
        bs, depth, k, budget = rng.randint(1, 4), rng.randint(1, 8), rng.randint(1, 6), rng.randint(1, 20)
        lp, tk = random_topk(g, bs, depth, k)
        ref = du.build_tree_batch(list(range(bs)), lp, tk, budget, k)
        dev = dd.build_tree_device(lp, tk, torch.arange(bs), budget, k)
        width = budget + 1
        prefix = [rng.randint(0, 9) for _ in range(bs)]
        want_mask = du.build_tree_attention_mask(ref.parents, torch.tensor(prefix), prefix)
        assert torch.equal(dd.tree_mask_flat(dev.ancestors, torch.tensor(prefix), prefix), want_mask)
        # the index the build makes with the tree (0105): the same mask from one fill and one scatter
        index = dd.tree_mask_index(torch.tensor(prefix), width)
        assert torch.equal(dd.tree_mask_flat(dev.ancestors, torch.tensor(prefix), prefix, index=index), want_mask)
        predict = torch.randint(0, 60, (bs, width), generator=g)
        for b in range(bs):  # the target agrees along a random root path (any branch)
            cur = 0
            for _ in range(rng.randint(0, depth)):
                kids = [s for s in range(1, width) if int(ref.parents[b, s]) == cur]
                if not kids:
                    break
                nxt = rng.choice(kids)
                predict[b, cur] = ref.tokens[b, nxt]
                cur = nxt
        want = du.greedy_accept(ref, predict)
        got = dd.accept_and_fetch(dev, predict)
        assert (got.paths, got.accept_lens, got.bonus) == (want.paths, want.accept_lens, want.bonus)
        assert got.accepted_tokens == want.accepted_tokens
        assert got.accept_lens_dev.tolist() == want.accept_lens and got.bonus_dev.tolist() == want.bonus
        assert got.num_nodes == ref.num_nodes
        commit = [rng.randint(0, len(p)) for p in want.paths]
        keep, drop = dd.commit_indexes(got.path_dev, torch.tensor(commit, dtype=torch.int32), commit)
        want_keep, want_drop = du.compaction_indices(want.paths, commit, width)
        assert torch.equal(keep, want_keep) and torch.equal(drop, want_drop)
        # what a step runs: the same lists from the walk's host copy (no device work)
        host_keep, host_drop = dd.host_commit_indexes(got.paths, commit, width)
        assert host_keep == want_keep.tolist() and host_drop == want_drop.tolist()


def test_host_commit_indexes_linear_layout_and_refusal(dd):
    """The test-only 'kv' break commits the linear layout's first slots; a commit longer than the
    accepted path is a caller's bug and is refused."""
    keep, drop = dd.host_commit_indexes([list(range(4))] * 2, [3, 0], 4)
    assert keep == [0, 1, 2] and drop == [3, 4, 5, 6, 7]
    keep, drop = dd.host_commit_indexes([[0, 2, 3], [0]], [3, 1], 4)
    assert keep == [0, 2, 3, 4] and drop == [1, 5, 6, 7]
    with pytest.raises(ValueError, match="request 1 commits 2 tokens"):
        dd.host_commit_indexes([[0], [0]], [1, 2], 4)


def test_padding_is_never_accepted_on_the_device(du, dd):
    chain = du.pack_trees([5], [du.build_chain([[10], [20]], 2)], budget=6)
    dev = dd.device_tree_from_batch(chain, "cpu")
    got = dd.accept_and_fetch(dev, torch.full((1, 7), 5))  # the target keeps naming the padding token
    assert got.paths == [[0]] and got.accept_lens == [0] and got.bonus == [5]


# ---------------------------------------------------------------- oracle


def test_device_oracle_equals_the_host_oracle(du, dd):
    g = torch.Generator().manual_seed(8)
    rng = random.Random(8)
    for _ in range(80):
        bs, depth, k = rng.randint(1, 3), rng.randint(1, 7), rng.randint(1, 6)
        lp, tk = random_topk(g, bs, depth, k, vocab=30)
        true = [[rng.choice([-1, rng.randint(0, 40), *tk[b, d].tolist()]) for d in range(depth)] for b in range(bs)]
        ranks = [rng.randint(-1, k + 1) for _ in range(rng.randint(0, depth + 2))]
        want = du.apply_oracle_topk(lp, tk, true, ranks, du.DEFAULT_ORACLE_PROFILE, 100)
        got = dd.apply_oracle_topk_device(lp, tk, torch.tensor(true), ranks, du.DEFAULT_ORACLE_PROFILE)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0])
        lin = tk[:, :, 0]
        assert torch.equal(
            dd.apply_oracle_linear_device(lin, torch.tensor(true), ranks, 100),
            du.apply_oracle_linear(lin, true, ranks, 100),
        )
    assert dd.host_tokens_to_device([[1, -1]], "cpu").tolist() == [[1, -1]]


# ---------------------------------------------------------------- no host read, fixed shapes


def _meta(t):
    return t.to("meta")


def test_device_code_runs_on_the_meta_device(dd):
    """Meta tensors have no values: any .item()/.tolist()/bool(), nonzero or masked indexing fails."""
    g = torch.Generator().manual_seed(9)
    lp, tk = random_topk(g, 2, 15, 8)
    roots, prefix = _meta(torch.tensor([3, 4])), _meta(torch.tensor([7, 30]))
    for budget in (1, 12):
        tree = dd.build_tree_device(_meta(lp), _meta(tk), roots, budget, 8, prefix)
        w = budget + 1
        assert tree.tokens.device.type == "meta"
        assert tree.tokens.shape == tree.parents.shape == tree.valid.shape == (2, w)
        assert tree.ancestors.shape == (2, w, w) and tree.positions.shape == (2 * w,)
        chain = dd.build_chain_device(_meta(tk), roots, budget, prefix)
        assert chain.ancestors.shape == (2, w, w)
        path, lens, bonus = dd.accept_walk(tree, torch.zeros((2, w), dtype=torch.int64, device="meta"))
        assert path.shape == (2, w) and lens.shape == bonus.shape == (2,)
        keep, drop = dd.commit_indexes(path, _meta(torch.tensor([2, 1])), [2, 1])
        assert keep.shape == (3,) and drop.shape == (2 * w - 3,)
        assert dd.tree_mask_flat(tree.ancestors, prefix, [7, 30]).shape == (w * (7 + w) + w * (30 + w),)
    out = dd.apply_oracle_topk_device(_meta(lp), _meta(tk), _meta(torch.zeros(2, 15, dtype=torch.int64)), [0, 1], [0.0] * 8)
    assert out[1].shape == (2, 15, 8)


def test_build_compiles_as_one_graph(dd):
    """torch.compile(fullgraph=True) refuses graph breaks: a host read or a branch on a value."""
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()
    build = torch.compile(
        lambda lp, tk, roots, prefix: dd.build_tree_device(lp, tk, roots, 5, 3, prefix),
        fullgraph=True,
        backend="eager",
    )
    g = torch.Generator().manual_seed(10)
    lp, tk = random_topk(g, 2, 4, 3)
    got = build(lp, tk, torch.tensor([1, 2]), torch.tensor([3, 4]))
    want = dd.build_tree_device(lp, tk, torch.tensor([1, 2]), 5, 3, torch.tensor([3, 4]))
    assert torch.equal(got.tokens, want.tokens) and torch.equal(got.ancestors, want.ancestors)


def test_the_build_dispatches_the_same_operators_for_any_values(dd):
    """Fixed work per step (what a CUDA graph replays): the operator sequence does not depend on
    the draft's numbers (random, flat, all -inf) and no operator reads a value to the host."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(11)
    inputs = [random_topk(g, 3, 9, 4)[0], torch.full((3, 9, 4), L(0.25)), torch.full((3, 9, 4), float("-inf"))]
    tk = random_topk(g, 3, 9, 4)[1]
    dd.build_tree_device(inputs[0], tk, torch.tensor([1, 2, 3]), 12, 4)  # a shape's first build makes its templates
    seqs = []
    for lp in inputs:
        with Record() as rec:
            dd.build_tree_device(lp, tk, torch.tensor([1, 2, 3]), 12, 4, torch.tensor([1, 2, 3]))
        seqs.append(rec.ops)
    assert seqs[0] == seqs[1] == seqs[2]
    host_reads = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default"}
    assert not host_reads & set(seqs[0])


# ---------------------------------------------------------------- generation with a toy target


def toy_target(seq):
    return (sum((i + 1) * t for i, t in enumerate(seq[-4:])) * 31 + len(seq)) % 50


@pytest.mark.parametrize("budget,topk,ranks", [(15, 8, [0, 1, 0, 2, 0]), (31, 4, [1, 0, 3, 0, 1, 0]), (4, 1, [0, 0])])
def test_device_generation_equals_greedy_with_oracle(du, dd, budget, topk, ranks):
    """Draft (device oracle) -> device tree -> masked toy target -> device walk -> commit indexes."""
    prompt, n_new, depth = [3, 1, 4, 1, 5], 40, 15
    ref = list(prompt)
    for _ in range(n_new):
        ref.append(toy_target(ref))
    ref_out = ref[len(prompt) :]
    g = torch.Generator().manual_seed(budget)
    seq, kv, per_step = list(prompt) + [ref_out[0]], list(prompt), []
    while len(seq) - len(prompt) < n_new:
        done = len(seq) - len(prompt)
        true = [[ref_out[done + d] if done + d < n_new else -1 for d in range(depth)]]
        lp, tk = random_topk(g, 1, depth, topk, vocab=50)
        lp, tk = dd.apply_oracle_topk_device(lp, tk, torch.tensor(true), ranks, du.DEFAULT_ORACLE_PROFILE)
        tree = dd.build_tree_device(lp, tk, torch.tensor([seq[-1]]), budget, topk, torch.tensor([len(kv)]))
        w = budget + 1
        mask = dd.tree_mask_flat(tree.ancestors, torch.tensor([len(kv)]), [len(kv)]).view(w, len(kv) + w)
        predict = []
        for q in range(w):
            vis = sorted((k for k in range(w) if mask[q, len(kv) + k]), key=lambda k: int(tree.depths[0, k]))
            predict.append(toy_target(kv + [int(tree.tokens[0, k]) for k in vis]))
        res = dd.accept_and_fetch(tree, torch.tensor([predict]))
        proposed = res.accepted_tokens[0] + res.bonus
        commit = min(len(proposed), n_new - done)
        keep, _ = dd.commit_indexes(res.path_dev, torch.tensor([commit]), [commit])
        kv += [int(tree.tokens.view(-1)[k]) for k in keep]
        seq += proposed[:commit]
        assert kv == seq[:-1]
        if done + depth < n_new:
            per_step.append(res.accept_lens[0])
    assert seq[len(prompt) :] == ref_out
    want = du.expected_accept_len(ranks, du.DEFAULT_ORACLE_PROFILE, budget, topk, depth)
    assert per_step and set(per_step) == {want}


def test_draft_head_topk_logprobs_is_the_top_of_the_full_log_softmax(dd):
    """0106's head (replayed as one graph on CUDA): the k best rows of hidden @ weight.T, their float32
    log-softmax over the whole vocab, and the head row -> token id map applied."""
    g = torch.Generator().manual_seed(31)
    for rows, vocab, k, dtype in ((1, 50, 1, torch.float32), (15, 300, 8, torch.bfloat16), (60, 1000, 8, torch.float32)):
        hidden = torch.randn(rows, 16, generator=g)
        weight = torch.randn(vocab, 16, generator=g).to(dtype)
        ids = torch.randperm(vocab, generator=g) + 7000  # token ids of the shard's rows
        lp, tk = dd.topk_logprobs(hidden, weight, ids, k)
        full = torch.log_softmax(torch.matmul(hidden.to(dtype), weight.T).float(), dim=-1)
        want_lp, want_rows = torch.topk(full, k, dim=-1)
        assert lp.dtype == torch.float32 and lp.shape == tk.shape == (rows, k)
        assert torch.allclose(lp, want_lp, atol=1e-5) and torch.equal(tk, ids[want_rows])
        assert torch.all(lp[:, :-1] >= lp[:, 1:]) and torch.all(lp <= 0)
    meta_lp, meta_tk = dd.topk_logprobs(_meta(hidden), _meta(weight), _meta(ids), 8)  # no host reads
    assert meta_lp.shape == meta_tk.shape == (60, 8)


def test_graphed_calls_run_eagerly_off_cuda_with_the_same_results(dd):
    """GraphedCalls: off CUDA (and with graphs off) the function runs eagerly every call, on the
    call's own inputs, and no graph is kept; the head + oracle chain the worker runs gives the
    eager results."""
    g = torch.Generator().manual_seed(32)
    hidden, weight = torch.randn(2 * 15, 16, generator=g), torch.randn(400, 16, generator=g)
    ids = torch.arange(400) + 10
    true = torch.randint(10, 410, (2, 15), generator=g)
    for calls in (dd.GraphedCalls("draft head"), dd.GraphedCalls("draft head", use_graphs=False)):
        seen = []

        def head(h, seen=seen):
            seen.append(h)
            return dd.topk_logprobs(h, weight, ids, 8)

        lp, tk = calls(head, (hidden,), ("head", weight.data_ptr(), 8))
        assert seen == [hidden] and not calls._graphs and not calls._failed
        profile = tuple(float(-i) for i in range(8))
        got = calls(lambda a, b, t, p=profile: dd.apply_oracle_topk_device(a, b, t, (0, 1), p),
                    (lp.view(2, 15, 8), tk.view(2, 15, 8), true), ("oracle", (0, 1), profile))  # fmt: skip
        want = dd.apply_oracle_topk_device(lp.view(2, 15, 8), tk.view(2, 15, 8), true, (0, 1), profile)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert torch.equal(got[1][:, 0, 0], true[:, 0]) and torch.equal(got[1][:, 1, 1], true[:, 1])


class _StandInGraph:
    """What a captured CUDA graph does on replay: the captured function again, on the static
    inputs, into the static outputs (the same tensors every time)."""

    def __init__(self, fn, statics, out):
        self.fn, self.statics, self.out, self.replays = fn, statics, out, 0

    def replay(self):
        self.replays += 1
        for buf, new in zip(self.out, self.fn(*self.statics), strict=True):
            buf.copy_(new)


def test_graphed_calls_capture_once_per_signature_replay_and_fall_back(dd, caplog):
    """GraphedCalls' bookkeeping, driven on CPU with a stand-in capture: one capture per (key, input
    shapes, dtypes), later calls copy their inputs in and replay into the same output tensors; past
    max_graphs and after a failed capture (logged, never retried) the function runs eagerly."""
    captured = []

    def capture(fn, inputs):
        statics = tuple(t.clone() for t in inputs)
        captured.append(statics)
        out = fn(*statics)
        return _StandInGraph(fn, statics, out), statics, out

    calls = dd.GraphedCalls("draft head", max_graphs=2, device_type="cpu", capture=capture)
    double = lambda x, y: (x * 2, x + y)
    a, b = torch.arange(4.0), torch.ones(4)
    first = calls(double, (a, b), ("k", 1))
    assert len(captured) == 1 and torch.equal(first[0], a * 2) and torch.equal(first[1], a + 1)
    second = calls(double, (a + 10, b), ("k", 1))  # same signature: inputs copied in, replayed
    assert len(captured) == 1 and second[0] is first[0] and torch.equal(second[0], (a + 10) * 2)
    graph = calls._graphs[next(iter(calls._graphs))][0]
    assert graph.replays == 2
    calls(double, (torch.arange(6.0), torch.ones(6)), ("k", 1))  # another shape: another capture
    assert len(captured) == 2
    eager = calls(double, (a, b), ("k", 2))  # a third signature, past max_graphs: eager, nothing kept
    assert len(captured) == 2 and len(calls._graphs) == 2 and torch.equal(eager[0], a * 2)

    def broken(fn, inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    failing = dd.GraphedCalls("oracle", device_type="cpu", capture=broken)
    with caplog.at_level("WARNING"):
        got = failing(double, (a, b), ("o",))
        again = failing(double, (a + 1, b), ("o",))
    assert torch.equal(got[0], a * 2) and torch.equal(again[0], (a + 1) * 2)
    assert len(failing._failed) == 1 and not failing._graphs
    assert sum("capture failed" in r.getMessage() for r in caplog.records) == 1  # logged once, not retried
    assert dd.GraphedCalls("x", use_graphs=False, device_type="cpu", capture=broken)(double, (a, b))[0].equal(a * 2)
