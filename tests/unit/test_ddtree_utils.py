"""DDTree algorithm (files/patches/sglang/0.5.11/0101-ddtree-utils.patch) on CPU torch.

The module under test is the file that patch adds to sglang (`sglang/srt/speculative/ddtree_utils.py`);
it imports only torch, so it is rebuilt from the patch and imported on its own. Every case uses
synthetic distributions whose right answer is worked out by hand or by brute force.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "files/patches/sglang/0.5.11/0101-ddtree-utils.patch"
TARGET = "sglang/srt/speculative/ddtree_utils.py"


def new_file_from_patch(patch: Path, relpath: str) -> str:
    """Content of a file that a unified diff creates (--- /dev/null, one @@ -0,0 hunk)."""
    lines = patch.read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("+++ ") and line[4:].strip().split("\t")[0] == f"b/{relpath}":
            assert lines[i - 1].startswith("--- /dev/null"), "expected a new-file patch"
            hunk = lines[i + 1]
            assert hunk.startswith("@@ -0,0 +1,"), hunk
            count = int(hunk.split("+1,")[1].split()[0])
            body = lines[i + 2 : i + 2 + count]
            assert all(b.startswith("+") for b in body)
            return "".join(b[1:] for b in body)
    raise AssertionError(f"{relpath} not created by {patch}")


def load_from_patch(relpath: str, name: str, directory: Path):
    """Import, as module ``name``, the file the patch creates at ``relpath`` (written into ``directory``)."""
    path = Path(directory) / Path(relpath).name
    path.write_text(new_file_from_patch(PATCH, relpath), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def dd(tmp_path_factory):
    return load_from_patch(TARGET, "ddtree_utils_under_test", tmp_path_factory.mktemp("ddtree"))


L = math.log
# depth 1: tokens 10 (p .6), 11 (.3), 12 (.1); depth 2: 20 (.55), 21 (.4), 22 (.05);
# depth 3: 30 (.9), 31 (.05), 32 (.05)
LP = [[L(0.6), L(0.3), L(0.1)], [L(0.55), L(0.4), L(0.05)], [L(0.9), L(0.05), L(0.05)]]
TK = [[10, 11, 12], [20, 21, 22], [30, 31, 32]]


def paths_of(tree):
    """Token path from the root to every node (slot order)."""
    out = []
    for i in range(len(tree)):
        path, s = [], i + 1
        while s:
            path.append(tree.tokens[s - 1])
            s = tree.parents[s - 1]
        out.append(tuple(reversed(path)))
    return out


def brute_force(lp, tk, budget, topk):
    """All prefixes of rank sequences, scored, best `budget` (prefix-closed set by construction)."""
    scored = []
    for d in range(1, len(lp) + 1):
        for ranks in itertools.product(range(topk), repeat=d):
            score = sum(lp[j][r] for j, r in enumerate(ranks))
            scored.append((score, tuple(tk[j][r] for j, r in enumerate(ranks))))
    scored.sort(key=lambda x: -x[0])
    return scored[:budget]


# ---------------------------------------------------------------- construction


def test_best_first_order_hand_worked(dd):
    # path probabilities: (10) .6, (10,20) .33, (11) .3, (10,20,30) .297, (10,21) .24,
    # (10,21,30) .216, (11,20) .165, (11,20,30) .1485, (11,21) .12 ...
    t = dd.build_tree(LP, TK, budget=6, topk=3)
    assert paths_of(t) == [(10,), (10, 20), (11,), (10, 20, 30), (10, 21), (10, 21, 30)]
    assert t.parents == [0, 1, 0, 2, 1, 5]
    assert t.depths == [1, 2, 1, 3, 2, 3]
    assert t.ranks == [0, 0, 1, 0, 1, 0]
    assert [round(math.exp(s), 4) for s in t.scores] == [0.6, 0.33, 0.3, 0.297, 0.24, 0.216]


@pytest.mark.parametrize("budget,topk", [(1, 3), (4, 2), (7, 3), (12, 2), (20, 3), (39, 3)])
def test_matches_brute_force(dd, budget, topk):
    t = dd.build_tree(LP, TK, budget=budget, topk=topk)
    want = brute_force(LP, TK, budget, topk)
    assert len(t) == len(want)
    assert sorted(paths_of(t)) == sorted(p for _, p in want)
    # selection order is best-first: scores never increase, parents come before children
    assert all(a >= b - 1e-12 for a, b in zip(t.scores, t.scores[1:]))
    assert all(p < i + 1 for i, p in enumerate(t.parents))


def test_random_distributions_match_brute_force(dd):
    g = torch.Generator().manual_seed(7)
    for _ in range(20):
        depth, k = 4, 3
        logits = torch.randn(depth, 50, generator=g) * 3
        lp, tk = dd.topk_logprobs(logits, k)
        budget = int(torch.randint(1, 40, (1,), generator=g))
        t = dd.build_tree(lp.tolist(), tk.tolist(), budget, k)
        want = brute_force(lp.tolist(), tk.tolist(), budget, k)
        assert sorted(paths_of(t)) == sorted(p for _, p in want)


def test_topk_caps_children(dd):
    flat = [[L(1 / 3)] * 3 for _ in range(3)]  # every rank equally likely
    t = dd.build_tree(flat, TK, budget=12, topk=2)
    children = {}
    for p in t.parents:
        children[p] = children.get(p, 0) + 1
    assert max(children.values()) == 2
    assert set(t.ranks) == {0, 1}
    # equal scores: the whole depth-1 level (2 nodes) then depth 2 (4) then 6 of depth 3
    assert t.depths == [1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3]


def test_topk_one_is_the_chain(dd):
    t = dd.build_tree(LP, TK, budget=15, topk=1)
    assert paths_of(t) == [(10,), (10, 20), (10, 20, 30)]  # only 3 depths exist
    c = dd.build_chain(TK, 2)
    assert c.tokens == [10, 20] and c.parents == [0, 1] and c.depths == [1, 2]


def test_budget_limits_and_padding(dd):
    t = dd.build_tree(LP[:2], TK[:2], budget=10, topk=2)  # 2 + 4 nodes exist
    assert len(t) == 6
    batch = dd.pack_trees([7], [t], budget=10)
    assert batch.width == 11
    assert batch.valid[0].tolist() == [True] * 7 + [False] * 4
    assert batch.parents[0, 7:].tolist() == [-1] * 4
    assert batch.tokens[0, 0].item() == 7 and batch.depths[0, 0].item() == 0
    with pytest.raises(ValueError):
        dd.pack_trees([7], [t], budget=5)


# ---------------------------------------------------------------- mask and positions


def ancestors(parents_row, q):
    out = {q}
    while parents_row[q] >= 0:
        q = parents_row[q]
        out.add(q)
    return out


def test_mask_hand_worked(dd):
    t = dd.build_tree(LP, TK, budget=6, topk=3)  # parents [0,1,0,2,1,5]
    batch = dd.pack_trees([5], [t], budget=6)
    m = dd.dense_tree_mask(batch.parents[0], prefix_len=3)
    tree_part = m[:, 3:].int().tolist()
    assert tree_part == [
        [1, 0, 0, 0, 0, 0, 0],  # root
        [1, 1, 0, 0, 0, 0, 0],  # (10)
        [1, 1, 1, 0, 0, 0, 0],  # (10,20)
        [1, 0, 0, 1, 0, 0, 0],  # (11): not (10) nor (10,20)
        [1, 1, 1, 0, 1, 0, 0],  # (10,20,30)
        [1, 1, 0, 0, 0, 1, 0],  # (10,21)
        [1, 1, 0, 0, 0, 1, 1],  # (10,21,30)
    ]
    assert m[:, :3].all()  # the prefix is visible to every slot


def test_flat_mask_layout_batch(dd):
    g = torch.Generator().manual_seed(3)
    lp, tk = dd.topk_logprobs(torch.randn(2 * 5, 40, generator=g), 4)
    lp, tk = lp.view(2, 5, 4), tk.view(2, 5, 4)
    batch = dd.build_tree_batch([1, 2], lp, tk, budget=9, topk=4)
    chain = dd.build_tree_batch([3], lp[:1], tk[:1], budget=9, topk=4, linear=True)
    parents = torch.cat([batch.parents, chain.parents])
    prefix = [4, 0, 11]
    flat = dd.build_tree_attention_mask(parents, torch.tensor(prefix), prefix)
    w = 10
    assert flat.numel() == sum(w * (p + w) for p in prefix)
    off = 0
    for b, p in enumerate(prefix):
        block = flat[off : off + w * (p + w)].view(w, p + w)
        off += w * (p + w)
        assert block[:, :p].all()
        for q in range(w):
            allowed = {k for k in range(w) if block[q, p + k]}
            assert allowed == ancestors(parents[b].tolist(), q)
    # the ancestor sets precomputed while packing (bit masks) are the same, also beyond 62 slots
    anc = torch.cat([batch.ancestors, chain.ancestors])
    assert torch.equal(anc, dd.ancestor_matrix(parents))
    assert torch.equal(
        dd.build_tree_attention_mask(parents, torch.tensor(prefix), prefix, ancestors=anc), flat
    )
    wide = dd.build_tree_batch([1], lp[:1], tk[:1], budget=70, topk=4)
    assert wide.width == 71 and torch.equal(wide.ancestors, dd.ancestor_matrix(wide.parents))
    # the chain tree gives the causal mask DFlash uses (padding apart)
    n = chain.num_nodes[0] + 1
    block = flat[-w * (11 + w) :].view(w, 11 + w)[:n, 11 : 11 + n]
    assert torch.equal(block, torch.ones(n, n, dtype=torch.bool).tril())


def test_positions(dd):
    t = dd.build_tree(LP, TK, budget=6, topk=3)
    batch = dd.pack_trees([5, 6], [t, dd.build_chain(TK, 2)], budget=6)
    pos = dd.tree_positions(batch.depths, torch.tensor([100, 7]))
    assert pos.view(2, 7).tolist() == [[100, 101, 102, 101, 103, 102, 103], [7, 8, 9, 8, 8, 8, 8]]


# ---------------------------------------------------------------- acceptance


def test_accept_through_non_first_branch(dd):
    t = dd.build_tree(LP, TK, budget=9, topk=3)
    slots = {p: i + 1 for i, p in enumerate(paths_of(t))}
    assert (11,) in slots and (11, 20) in slots and (11, 20, 30) in slots
    batch = dd.pack_trees([5], [t], budget=9)
    predict = torch.full((1, 10), 999)
    predict[0, 0] = 11  # target wants rank 1 at depth 1
    predict[0, slots[(11,)]] = 20
    predict[0, slots[(11, 20)]] = 30
    predict[0, slots[(11, 20, 30)]] = 77  # bonus
    predict[0, slots[(10,)]] = 20  # a rejected sibling's own prediction is irrelevant
    r = dd.greedy_accept(batch, predict)
    assert r.paths == [[0, slots[(11,)], slots[(11, 20)], slots[(11, 20, 30)]]]
    assert r.accept_lens == [3] and r.bonus == [77] and r.accepted_tokens == [[11, 20, 30]]


def test_accept_nothing_and_padding_never_accepted(dd):
    chain = dd.build_chain(TK, 2)
    batch = dd.pack_trees([5], [chain], budget=6)  # slots 3..6 are padding with token 5
    predict = torch.full((1, 7), 5)  # target keeps predicting the padding token
    r = dd.greedy_accept(batch, predict)
    assert r.paths == [[0]] and r.accept_lens == [0] and r.bonus == [5]


def test_accept_batch(dd):
    t = dd.build_tree(LP, TK, budget=6, topk=3)
    batch = dd.pack_trees([5, 6], [t, dd.build_chain(TK, 3)], budget=6)
    predict = torch.zeros((2, 7), dtype=torch.long)
    predict[0, 0], predict[0, 1], predict[0, 5] = 10, 21, 31  # (10) -> (10,21) -> 31 not in tree
    predict[1, 0], predict[1, 1], predict[1, 2], predict[1, 3] = 10, 20, 30, 44
    r = dd.greedy_accept(batch, predict.view(-1))
    assert r.paths == [[0, 1, 5], [0, 1, 2, 3]]
    assert r.accept_lens == [2, 3] and r.bonus == [31, 44]


# ---------------------------------------------------------------- compaction


def test_compaction_indices_kv_and_hidden(dd):
    w = 7
    paths = [[0, 3, 4], [0], [0, 1, 2, 6]]
    commit = [3, 1, 2]  # request 2 finished after two tokens
    keep, drop = dd.compaction_indices(paths, commit, w)
    assert keep.tolist() == [0, 3, 4, 7, 14, 15]
    assert sorted(keep.tolist() + drop.tolist()) == list(range(3 * w))
    # simulate the verify-slot KV locations and the captured hidden states
    out_cache_loc = torch.arange(500, 500 + 3 * w)
    hidden = torch.arange(3 * w * 2).view(3 * w, 2).float()
    assert out_cache_loc[keep].tolist() == [500, 503, 504, 507, 514, 515]
    assert hidden[keep][:, 0].tolist() == [0.0, 6.0, 8.0, 14.0, 28.0, 30.0]
    assert out_cache_loc[drop].numel() == 3 * w - 6
    with pytest.raises(ValueError):
        dd.compaction_indices([[0]], [2], w)


# ---------------------------------------------------------------- distributions


def test_topk_logprobs_and_sharded_merge(dd):
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(6, 64, generator=g) * 4
    lp, ids = dd.topk_logprobs(logits, 5)
    ref = torch.log_softmax(logits, -1)
    assert torch.allclose(lp, ref.gather(1, ids), atol=1e-5)
    assert torch.equal(ids, ref.topk(5, -1).indices)
    # four vocab shards of 16, as a tensor-parallel LM head holds them
    vals, gids, lses = [], [], []
    for r in range(4):
        shard = logits[:, r * 16 : (r + 1) * 16]
        v, i = shard.topk(5, -1)
        vals.append(v)
        gids.append(i + r * 16)
        lses.append(torch.logsumexp(shard, -1))
    mlp, mids = dd.merge_sharded_topk(torch.stack(vals), torch.stack(gids), torch.stack(lses), 5)
    assert torch.equal(mids, ids)
    assert torch.allclose(mlp, lp, atol=1e-5)


# ---------------------------------------------------------------- oracle


def test_oracle_puts_true_token_at_rank(dd):
    lp = torch.log(torch.tensor([[[0.5, 0.3, 0.2]] * 3]))
    tk = torch.tensor([[[1, 2, 3], [4, 5, 6], [7, 8, 9]]])
    prof = [L(0.8), L(0.15), L(0.05)]
    nlp, ntk = dd.apply_oracle_topk(lp, tk, [[2, 40, 9]], ranks=[0, 1, 5], profile=prof, vocab_size=100)
    assert ntk[0, 0].tolist() == [2, 1, 3]  # 2 moved to rank 0
    assert ntk[0, 1].tolist() == [4, 40, 5]  # 40 inserted at rank 1
    assert 9 not in ntk[0, 2].tolist() and len(set(ntk[0, 2].tolist())) == 3  # rank 5 >= k: absent
    assert torch.allclose(nlp[0, 0], torch.tensor(prof))
    lin = dd.apply_oracle_linear(torch.tensor([[2, 40, 3]]), [[5, 40, 3]], [0, 1, -1], vocab_size=100)
    assert lin.tolist() == [[5, 41, 3]]


def test_oracle_reference_lookup(dd, tmp_path):
    import json

    f = tmp_path / "oracle.json"
    f.write_text(json.dumps({"reference": [{"input_ids": [1, 2], "output_ids": [5, 6, 7, 8]}], "ranks": [0]}))
    o = dd.Oracle(str(f))
    spec = o.refresh()
    assert spec.ranks == [0] and spec.topk is None
    assert o.true_tokens([1, 2], [5], 3) == [6, 7, 8]
    assert o.true_tokens([1, 2], [5, 6, 7], 3) == [8, -1, -1]
    assert o.true_tokens([1, 2], [9], 2) == [-1, -1]  # diverged
    assert o.true_tokens([3], [5], 2) == [-1, -1]  # unknown prompt
    # a half-written file switches steering off instead of raising inside the server
    import os

    f.write_text('{"reference": [')
    os.utime(f, ns=(1, 1))
    assert o.refresh() is None and o.true_tokens([1, 2], [5], 2) == [-1, -1]
    f.write_text(json.dumps({"reference": [{"input_ids": [1], "output_ids": None}], "ranks": []}))
    assert o.refresh().reference == {}


def test_expected_accept_len(dd):
    prof = dd.DEFAULT_ORACLE_PROFILE
    assert dd.expected_accept_len([0, 0, 0, 0], prof, budget=15, topk=8, depth_count=15) == 4
    assert dd.expected_accept_len([0, 0, 0, 0], prof, budget=3, topk=8, depth_count=15) == 3
    assert dd.expected_accept_len([0, 1, 0], prof, budget=15, topk=1, depth_count=15) == 1
    assert dd.expected_accept_len([0, 1, 0], prof, budget=15, topk=4, depth_count=15) == 3


# ---------------------------------------------------------------- end to end on a toy target


def toy_target(seq):
    """Deterministic 'greedy target': next token from the visible sequence."""
    return (sum((i + 1) * t for i, t in enumerate(seq[-4:])) * 31 + len(seq)) % 50


def tree_verify(dd, tree, prefix_tokens, prefix_len):
    """What a target forward with the ancestor mask predicts at each slot of one request."""
    w = tree.width
    mask = dd.build_tree_attention_mask(tree.parents, torch.tensor([prefix_len]), [prefix_len]).view(
        w, prefix_len + w
    )
    pos = dd.tree_positions(tree.depths, torch.tensor([prefix_len])).tolist()
    out = []
    for q in range(w):
        vis = [k for k in range(w) if mask[q, prefix_len + k]]
        vis.sort(key=lambda k: pos[k])
        assert [pos[k] for k in vis] == list(range(prefix_len, pos[q] + 1))  # one token per position
        out.append(toy_target(prefix_tokens + [int(tree.tokens[0, k]) for k in vis]))
    return torch.tensor([out])


@pytest.mark.parametrize(
    "budget,topk,ranks",
    [(15, 8, [0, 1, 0, 2, 0]), (7, 4, [0, 0, 0, 0, 0, 0, 0]), (31, 4, [1, 0, 3, 0, 1, 0]), (4, 1, [0, 0])],
)
def test_generation_equals_greedy_with_oracle(dd, budget, topk, ranks):
    prompt = [3, 1, 4, 1, 5]
    n_new = 40
    ref = list(prompt)
    for _ in range(n_new):
        ref.append(toy_target(ref))
    ref_out = ref[len(prompt) :]

    g = torch.Generator().manual_seed(budget)
    seq = list(prompt) + [ref_out[0]]  # prefill produced the first token
    kv = list(seq[:-1])  # tokens whose KV is cached (verified token not yet)
    per_step = []
    depth_count = 15
    while len(seq) - len(prompt) < n_new:
        out_so_far = seq[len(prompt) :]
        true = [
            ref_out[len(out_so_far) + d] if len(out_so_far) + d < n_new else -1 for d in range(depth_count)
        ]
        lp, tk = dd.topk_logprobs(torch.randn(depth_count, 50, generator=g), topk)
        lp, tk = dd.apply_oracle_topk(lp[None], tk[None], [true], ranks, dd.DEFAULT_ORACLE_PROFILE, 50)
        tree = dd.build_tree_batch([seq[-1]], lp, tk, budget, topk)
        predict = tree_verify(dd, tree, kv, len(kv))
        res = dd.greedy_accept(tree, predict)
        proposed = res.accepted_tokens[0] + res.bonus
        commit = min(len(proposed), n_new - len(out_so_far))
        keep, _ = dd.compaction_indices(res.paths, [commit], tree.width)
        kv += [int(tree.tokens.view(-1)[k]) for k in keep]  # KV of the kept slots, in order
        seq += proposed[:commit]
        assert kv == seq[:-1]
        if len(out_so_far) + depth_count < n_new:  # away from the end, the oracle's tree is exact
            per_step.append(res.accept_lens[0])
    assert seq[len(prompt) :] == ref_out
    want = dd.expected_accept_len(ranks, dd.DEFAULT_ORACLE_PROFILE, budget, topk, depth_count)
    assert per_step and set(per_step) == {want}, (per_step, want)
