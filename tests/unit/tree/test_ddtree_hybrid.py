"""DDTREE on hybrid targets: per-node linear-attention state (0103's ddtree_hybrid.py), on CPU.

The oracle is brute force: for every tree node, a gated-delta recurrence (the Gated DeltaNet
update of Qwen3.5 / Qwen3-Next, float64 here) and a causal conv1d of kernel 4 are run token by
token along the node's root-to-node path, from the request's state before the step. The tree
side does what sglang 0.5.11's verify kernels do with DDTREE's links: the causal-conv kernel
walks the verify slots in order and rebuilds each slot's parent from `retrieve_next_token` /
`retrieve_next_sibling` (ported here step by step from causal_conv1d_triton.py), then every slot
starts from its parent's cached state (fused_sigmoid_gating_recurrent.py). Checked: every
node's state, conv window and output equal the brute force on its path, for trees built by the
series' own best-first builder; the committed slot is the accepted node's, also through
non-first branches, while the linear slot (what the test-only broken commit uses) is wrong
there; the radix cache's tracking-point slot holds exactly the tracking point's state.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")

SPEC = "sglang/srt/speculative"  # the series' files come through test_ddtree_patch.series_texts
K_CONV = 4


@pytest.fixture(scope="module")
def mods(tmp_path_factory):
    """ddtree_hybrid.py, ddtree_utils.py and ddtree_device.py as the series installs them (torch only)."""
    from test_ddtree_patch import series_texts

    names = ("ddtree_hybrid", "ddtree_utils", "ddtree_device")
    texts = series_texts([f"{SPEC}/{n}.py" for n in names])
    root = tmp_path_factory.mktemp("hybrid")
    out = {}
    for name in names:
        path = root / f"{name}.py"
        path.write_text(texts[f"{SPEC}/{name}.py"])
        spec = importlib.util.spec_from_file_location(f"dd_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        out[name] = mod
    return out


# ------------------------------------------------------------------ the recurrence (oracle)


class Layer:
    """One tiny Gated DeltaNet layer: conv1d (kernel 4, SiLU) then the gated delta rule."""

    def __init__(self, seed, heads=2, dk=4, dv=3):
        g = torch.Generator().manual_seed(seed)
        self.h, self.dk, self.dv = heads, dk, dv
        ch = heads * (2 * dk + dv)
        self.ch = ch
        self.conv_w = torch.randn(ch, K_CONV, generator=g, dtype=torch.float64) * 0.7
        self.a_log = torch.randn(heads, generator=g, dtype=torch.float64) * 0.3
        self.dt_bias = torch.randn(heads, generator=g, dtype=torch.float64) * 0.3

    def conv(self, window, x):
        """window: the K-1 previous inputs (oldest first); -> (SiLU output, new window)."""
        full = torch.cat([window, x.view(1, -1)], 0)  # [K, ch]
        acc = (full.T * self.conv_w).sum(-1)
        return acc * torch.sigmoid(acc), full[1:]

    def delta(self, h, y, a, b):
        """h: [heads, dk, dv]; y: conv output; a, b: [heads] -> (output [heads, dv], new h)."""
        q, k, v = torch.split(y, [self.h * self.dk, self.h * self.dk, self.h * self.dv])
        q, k, v = q.view(self.h, self.dk), k.view(self.h, self.dk), v.view(self.h, self.dv)
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        g = -torch.exp(self.a_log) * torch.nn.functional.softplus(a + self.dt_bias)
        beta = torch.sigmoid(b)
        h = h * torch.exp(g).view(-1, 1, 1)
        vv = (v - torch.einsum("hkv,hk->hv", h, k)) * beta.view(-1, 1)
        h = h + torch.einsum("hk,hv->hkv", k, vv)
        o = torch.einsum("hkv,hk->hv", h, q) / math.sqrt(self.dk)
        return o, h

    def step(self, state, tok_input):
        window, h = state
        x, a, b = tok_input
        y, window = self.conv(window, x)
        o, h = self.delta(h, y, a, b)
        return o, (window, h)


def token_inputs(layer, token, seed):
    """Deterministic per-token inputs (what the layer's projections would give for this token)."""
    g = torch.Generator().manual_seed(seed * 1000003 + token)
    return (torch.randn(layer.ch, generator=g, dtype=torch.float64),
            torch.randn(layer.h, generator=g, dtype=torch.float64),
            torch.randn(layer.h, generator=g, dtype=torch.float64))  # fmt: skip


def initial_state(layer, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(K_CONV - 1, layer.ch, generator=g, dtype=torch.float64),
            torch.randn(layer.h, layer.dk, layer.dv, generator=g, dtype=torch.float64) * 0.1)  # fmt: skip


def brute_force(layer, state, tokens, seed):
    """Outputs and states after each token of a plain sequence."""
    outs, states = [], []
    for t in tokens:
        o, state = layer.step(state, token_inputs(layer, t, seed))
        outs.append(o)
        states.append(state)
    return outs, states


# ------------------------------------------------------------------ the kernels' tree walk


def kernel_parents(next_token, next_sibling):
    """sglang's causal-conv kernel (HAS_EAGLE_TREE_CUSTOM_ATTN_MASK): parents from the links.

    The kernel walks the slots in order; at slot i it sets parent[next_token[i]] = i and
    parent[next_sibling[i]] = parent[i]; slots nobody names keep parent 0 (the root)."""
    width = len(next_token)
    parent = [0] * width
    for i in range(width):
        if next_token[i] != -1:
            parent[next_token[i]] = i
        if next_sibling[i] != -1:
            parent[next_sibling[i]] = parent[i]
    return parent


def tree_verify(layer, state0, tokens, parent, seed):
    """Each slot from its parent's cached state (slot 0 from the request's state)."""
    cached, outs = [], []
    for s, t in enumerate(tokens):
        start = state0 if s == 0 else cached[parent[s]]
        o, st = layer.step(start, token_inputs(layer, t, seed))
        cached.append(st)
        outs.append(o)
    return outs, cached


def random_tree(du, seed, budget=12, topk=3, depth=6, bs=1, sharp=2.0):
    g = torch.Generator().manual_seed(seed)
    lp, ids = du.topk_logprobs(torch.randn(bs * depth, 50, generator=g) * sharp, topk)
    return du.build_tree_batch(list(range(40, 40 + bs)), lp.view(bs, depth, topk), ids.view(bs, depth, topk),
                               budget, topk)  # fmt: skip


def path_of(parents_row, node):
    path = [node]
    while path[-1] != 0:
        path.append(int(parents_row[path[-1]]))
    return path[::-1]


def same(a, b):
    return all(torch.allclose(x, y, rtol=0, atol=1e-12) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------ tests


def test_links_name_first_child_and_next_sibling(mods):
    dh = mods["ddtree_hybrid"]
    #      0
    #    / | \
    #   1  2  5       slots in best-first order; 6, 7 padding
    #  / \    |
    # 3   4   6
    parents = torch.tensor([[-1, 0, 0, 1, 1, 0, 5, -1]])
    nxt, sib = dh.tree_retrieve_links(parents)
    assert nxt.dtype == sib.dtype == torch.int32
    assert nxt.tolist() == [[1, 3, -1, -1, -1, 6, -1, -1]]
    assert sib.tolist() == [[-1, 2, 5, 4, -1, -1, -1, -1]]
    assert kernel_parents(nxt[0].tolist(), sib[0].tolist())[1:7] == [0, 0, 1, 1, 0, 5]


def test_links_of_a_chain_are_the_linear_layout(mods):
    dh = mods["ddtree_hybrid"]
    parents = torch.tensor([[-1, 0, 1, 2, 3], [-1, 0, 1, -1, -1]])
    nxt, sib = dh.tree_retrieve_links(parents)
    assert nxt.tolist() == [[1, 2, 3, 4, -1], [1, 2, -1, -1, -1]]
    assert (sib == -1).all()


@pytest.mark.parametrize("seed", range(6))
def test_every_node_state_equals_the_brute_force_along_its_path(mods, seed):
    dh, du = mods["ddtree_hybrid"], mods["ddtree_utils"]
    tree = random_tree(du, seed, budget=12 + seed, topk=2 + seed % 3)
    layer = Layer(seed)
    state0 = initial_state(layer, seed + 100)
    nxt, sib = dh.tree_retrieve_links(tree.parents)
    n = tree.num_nodes[0]
    parent = kernel_parents(nxt[0].tolist(), sib[0].tolist())
    assert parent[1 : n + 1] == tree.parents[0, 1 : n + 1].tolist()  # the kernel finds every real parent
    tokens = tree.tokens[0].tolist()
    outs, cached = tree_verify(layer, state0, tokens, parent, seed)
    for node in range(n + 1):
        path = path_of(tree.parents[0], node)
        b_outs, b_states = brute_force(layer, state0, [tokens[s] for s in path], seed)
        assert same(b_states[-1], cached[node]), f"node {node} path {path}"
        assert torch.allclose(b_outs[-1], outs[node], rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_links_of_the_device_built_trees_give_the_kernel_every_parent(mods, seed):
    """The trees the worker verifies come from ddtree_device's build (batched, padded)."""
    dh, dd = mods["ddtree_hybrid"], mods["ddtree_device"]
    g = torch.Generator().manual_seed(seed)
    bs, depth, topk = 3, 7, 4
    lp, ids = mods["ddtree_utils"].topk_logprobs(torch.randn(bs * depth, 60, generator=g) * 2.0, topk)
    tree = dd.build_tree_device(lp.view(bs, depth, topk), ids.view(bs, depth, topk), torch.tensor([5, 6, 7]),
                                15, topk)  # fmt: skip
    nxt, sib = dh.tree_retrieve_links(tree.parents)
    for b in range(bs):
        n = int(tree.num_nodes[b])
        parent = kernel_parents(nxt[b].tolist(), sib[b].tolist())
        assert parent[1 : n + 1] == tree.parents[b, 1 : n + 1].tolist()


def test_the_commit_takes_the_accepted_node_state_through_a_non_first_branch(mods):
    dh, du = mods["ddtree_hybrid"], mods["ddtree_utils"]
    seed = 3
    layer = Layer(seed)
    state0 = initial_state(layer, 7)
    tree = random_tree(du, 11, budget=14, topk=3, bs=2)
    nxt, sib = dh.tree_retrieve_links(tree.parents)
    # accept, per request, the deepest node whose path leaves the first chain (a rank >= 1 child)
    paths, commit = [], []
    for b in range(2):
        nodes = tree.nodes[b]
        best = max(range(1, tree.num_nodes[b] + 1),
                   key=lambda s: (any(nodes.ranks[p - 1] > 0 for p in path_of(tree.parents[b], s)[1:]),
                                  int(tree.depths[b, s])))  # fmt: skip
        path = path_of(tree.parents[b], best)
        assert path != list(range(len(path)))  # off the linear layout
        paths.append(path)
        commit.append(len(path))  # root + accepted nodes (the bonus has no state yet)
    slots = dh.path_slots_tensor(paths, tree.width)
    commit_lens = torch.tensor(commit)
    steps = dh.accepted_state_slots(slots, commit_lens)
    assert steps.tolist() == [p[-1] for p in paths]
    assert dh.host_state_slots(paths, commit) == steps.tolist()  # what the step runs, from the host copy
    wrong = dh.linear_state_slots(commit_lens)
    for b in range(2):
        tokens = tree.tokens[b].tolist()
        parent = kernel_parents(nxt[b].tolist(), sib[b].tolist())
        _, cached = tree_verify(layer, state0, tokens, parent, seed)
        _, b_states = brute_force(layer, state0, [tokens[s] for s in paths[b]], seed)
        assert same(cached[int(steps[b])], b_states[-1])
        # the control: a tree-unaware commit (slot = path position) keeps another node's state
        assert int(wrong[b]) != int(steps[b])
        assert not same(cached[int(wrong[b])], b_states[-1])


def test_nothing_committed_and_partial_commits(mods):
    dh = mods["ddtree_hybrid"]
    slots = dh.path_slots_tensor([[0, 2, 5], [0], [0, 1]], 8)
    assert slots.tolist()[0] == [0, 2, 5, -1, -1, -1, -1, -1]
    # a request that finished after the first accepted node commits that node's state
    assert dh.accepted_state_slots(slots, torch.tensor([2, 1, 0])).tolist() == [2, 0, -1]
    assert dh.host_state_slots([[0, 2, 5], [0], [0, 1]], [2, 1, 0]) == [2, 0, -1]
    with pytest.raises(ValueError, match="more than W"):
        dh.path_slots_tensor([[0, 1, 2]], 2)


@pytest.mark.parametrize(("pre", "commit", "interval"), [(60, 5, 64), (62, 3, 64), (63, 1, 64), (61, 3, 64),
                                                          (64, 4, 64), (10, 7, 8), (127, 2, 128)])
def test_tracking_point_slot_holds_exactly_the_tracking_point_state(mods, pre, commit, interval):
    dh, du = mods["ddtree_hybrid"], mods["ddtree_utils"]
    seed = pre + commit
    layer = Layer(seed)
    state0 = initial_state(layer, 5)
    tree = random_tree(du, seed, budget=14, topk=2, sharp=6.0)  # deep enough for every commit length here
    nxt, sib = dh.tree_retrieve_links(tree.parents)
    deepest = max(range(tree.num_nodes[0] + 1), key=lambda s: int(tree.depths[0, s]))
    path = path_of(tree.parents[0], deepest)[:commit]
    assert len(path) == commit
    post = pre + commit
    slot = dh.mamba_track_slots(dh.path_slots_tensor([path], tree.width), torch.tensor([pre]),
                                torch.tensor([post]), torch.tensor([commit]), interval)  # fmt: skip
    assert dh.host_track_slots([path], [pre], [commit], interval) == slot.tolist()  # the step's host copy
    crossed = pre // interval != post // interval
    if not crossed:
        assert slot.tolist() == [-1]
        return
    point = post // interval * interval
    tokens = tree.tokens[0].tolist()
    _, cached = tree_verify(layer, state0, tokens, kernel_parents(nxt[0].tolist(), sib[0].tolist()), seed)
    _, b_states = brute_force(layer, state0, [tokens[s] for s in path[: point - pre]], seed)
    assert same(cached[int(slot[0])], b_states[-1])  # the state of exactly `point` tokens


def test_break_switch_is_read_from_its_file(mods, tmp_path, monkeypatch):
    dh = mods["ddtree_hybrid"]
    monkeypatch.delenv(dh.BREAK_ENV, raising=False)
    assert dh.break_mode() is None
    f = tmp_path / "break"
    monkeypatch.setenv(dh.BREAK_ENV, str(f))
    assert dh.break_mode() is None  # armed, file absent: off
    f.write_text("state\n")
    assert dh.break_mode() == "state"
    f.write_text("kv")
    assert dh.break_mode() == "kv"
    f.write_text("everything")
    assert dh.break_mode() is None


def test_host_slots_equal_the_device_slots_on_random_batches(mods):
    """host_state_slots / host_track_slots against accepted_state_slots / mamba_track_slots: random
    trees, random accepted paths (any branch), every commit length, tracking intervals around them."""
    dh, du = mods["ddtree_hybrid"], mods["ddtree_utils"]
    rng = random.Random(4)
    for seed in range(40):
        bs = rng.randint(1, 4)
        tree = random_tree(du, 100 + seed, budget=rng.randint(1, 15), topk=rng.randint(1, 4), bs=bs)
        paths = [path_of(tree.parents[b], rng.randint(0, tree.num_nodes[b])) for b in range(bs)]
        commit = [rng.randint(0, len(p)) for p in paths]
        pre = [rng.randint(0, 300) for _ in range(bs)]
        interval = rng.choice([1, 2, 8, 64, 256])
        slots = dh.path_slots_tensor(paths, tree.width)
        lens = torch.tensor(commit)
        assert dh.host_state_slots(paths, commit) == dh.accepted_state_slots(slots, lens).tolist()
        want = dh.mamba_track_slots(slots, torch.tensor(pre), torch.tensor(pre) + lens, lens, interval)
        assert dh.host_track_slots(paths, pre, commit, interval) == want.tolist(), (paths, pre, commit, interval)
