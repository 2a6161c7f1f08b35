"""One DDTREE verify step through the real patched sglang code, on CPU.

The files under test come from the patch series (with the DDTree patches appended if the series
does not list them yet) applied to the pinned sglang 0.5.11 wheel with module_utils/dflash_tree/:
the unmodified
`dflash_info.py` (DFlashVerifyInput.prepare_for_verify: KV slot allocation and the req->token
table), `spec_info.py`, and the DDTree files `ddtree_utils.py`, `ddtree_device.py` and
`ddtree_worker.py` (DDTreeVerifyInput.verify). Trees come from the device build (what the worker
runs) and from the host reference behind the test switch (converted as the worker converts it). What needs a GPU build of sglang (triton kernels, the scheduler,
the allocator) is replaced by small stand-ins with the same semantics, written here: a
sequential KV allocator that records frees, `assign_req_to_token_pool_func` as the plain
loop it is, and a toy greedy "target" that sees exactly what the tree attention mask lets
each verify slot see. Checked: committed tokens equal the target's own greedy continuation,
the req->token table holds the accepted path's KV slots in order, every other verify slot is
freed, sequence lengths advance by the commit, and the captured hidden states handed to the
draft are the accepted path's, in order; also when a request finishes in the middle of a path.
And the verify reads the device once: one device->host copy (the packed walk result), as DFlash.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it from the index or find-links pip is configured with")

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "unit"))
SPEC = "sglang/srt/speculative"


MODULES = ("spec_info", "ddtree_utils", "ddtree_device", "ddtree_hybrid", "dflash_info", "ddtree_worker")


def series_files(exclude=()):
    """relpath -> text of the series (less the patches named in `exclude`) applied to the real wheel."""
    from test_ddtree_patch import series_texts

    return series_texts([f"{SPEC}/{n}.py" for n in MODULES], exclude=exclude)


@pytest.fixture(scope="module")
def tree_files():
    """relpath -> text of the series applied to the real wheel (downloaded once, cached)."""
    return series_files()


class Allocator:
    def __init__(self, start=1000):
        self.next = start
        self.freed = []

    def alloc(self, n):
        out = torch.arange(self.next, self.next + n, dtype=torch.int64)
        self.next += n
        return out

    def free(self, locs):
        self.freed += locs.tolist()


def assign_req_to_token_pool_func(req_pool_indices, req_to_token, start, end, out_cache_loc, bs):
    off = 0
    for i in range(bs):
        s, e = int(start[i]), int(end[i])
        req_to_token[int(req_pool_indices[i]), s:e] = out_cache_loc[off : off + e - s].to(req_to_token.dtype)
        off += e - s


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def _load(name, text, path):
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(text, path, "exec"), mod.__dict__)  # noqa: S102 - the patched sglang file itself
    return mod


@pytest.fixture(scope="module")
def sg(tree_files):
    """Import the real patched modules with stand-ins for their GPU-only imports."""
    with patched_modules(tree_files) as mods:
        yield mods


@contextlib.contextmanager
def patched_modules(tree_files):
    """The real patched modules (namespace by short name) with stand-ins for their GPU-only imports;
    sys.modules as it was afterwards. Also used by benchmarks/ddtree_step_ops.py."""
    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]

    class ForwardMode:
        TARGET_VERIFY = "target_verify"

    class CaptureHiddenMode:
        NULL, FULL = 0, 2

    def alloc_token_slots(tree_cache, n, backup_state=False):
        return tree_cache.token_to_kv_pool_allocator.alloc(n)

    stand_ins = {
        "sglang": _module("sglang"),
        "sglang.srt": _module("sglang.srt"),
        "sglang.srt.speculative": _module("sglang.srt.speculative"),
        "sglang.srt.layers.attention.utils": _module(
            "sglang.srt.layers.attention.utils", create_flashinfer_kv_indices_triton=None
        ),
        "sglang.srt.layers.logits_processor": _module(
            "sglang.srt.layers.logits_processor", LogitsProcessorOutput=object
        ),
        "sglang.srt.layers.sampler": _module("sglang.srt.layers.sampler", apply_custom_logit_processor=None),
        "sglang.srt.managers.schedule_batch": _module(
            "sglang.srt.managers.schedule_batch", ScheduleBatch=object
        ),
        "sglang.srt.mem_cache.common": _module(
            "sglang.srt.mem_cache.common",
            alloc_paged_token_slots_extend=None,
            alloc_token_slots=alloc_token_slots,
            get_last_loc=None,
        ),
        "sglang.srt.model_executor.forward_batch_info": _module(
            "sglang.srt.model_executor.forward_batch_info",
            CaptureHiddenMode=CaptureHiddenMode,
            ForwardMode=ForwardMode,
        ),
        "sglang.srt.speculative.dflash_utils": _module(
            "sglang.srt.speculative.dflash_utils",
            compute_dflash_accept_len_and_bonus=None,
            compute_dflash_sampling_accept_len_and_bonus=None,
            is_dflash_sampling_verify_available=lambda: False,
            parse_dflash_draft_config=None,
            resolve_dflash_verify_mask_policy=None,
        ),
        "sglang.srt.speculative.spec_utils": _module(
            "sglang.srt.speculative.spec_utils", assign_req_to_token_pool_func=assign_req_to_token_pool_func
        ),
        "sglang.srt.speculative.dflash_worker": _module(
            "sglang.srt.speculative.dflash_worker", DFlashWorker=object
        ),
        "sglang.srt.distributed": _module(
            "sglang.srt.distributed",
            get_tp_group=lambda: types.SimpleNamespace(world_size=1, broadcast=lambda t, src=0: t),
        ),
    }
    sys.modules.update(stand_ins)
    mods = {}
    try:
        for name in MODULES:
            rel = f"{SPEC}/{name}.py"
            mods[name] = _load(f"sglang.srt.speculative.{name}", tree_files[rel], rel)
        yield types.SimpleNamespace(**mods)
    finally:
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)


VOCAB = 97


def toy_target(seq):
    return (sum((i + 1) * t for i, t in enumerate(seq[-5:])) * 13 + 3 * len(seq)) % VOCAB


class Req:
    def __init__(self, prompt, max_new):
        self.origin_input_ids = list(prompt)
        self.output_ids = []
        self.max_new = max_new
        self.grammar = None
        self.spec_verify_ct = 0
        self.spec_accepted_drafts = 0
        self.kv_committed_len = 0
        self.kv_allocated_len = 0

    def check_finished(self):
        pass

    def finished(self):
        return len(self.output_ids) >= self.max_new


class Mode:
    def is_idle(self):
        return False


class Batch:
    def __init__(self, reqs, prefix_tokens, allocator):
        self.reqs = reqs
        self.forward_mode = Mode()
        self.device = "cpu"
        self.sampling_info = None
        self.req_pool_indices = torch.tensor([3, 1][: len(reqs)], dtype=torch.int64)
        self.req_to_token = torch.full((4, 300), -1, dtype=torch.int64)
        self.req_to_token_pool = types.SimpleNamespace(req_to_token=self.req_to_token)
        self.token_to_kv_pool_allocator = allocator
        self.tree_cache = types.SimpleNamespace(token_to_kv_pool_allocator=allocator)
        lens = [len(p) for p in prefix_tokens]
        self.seq_lens = torch.tensor(lens, dtype=torch.int32)
        self.seq_lens_cpu = torch.tensor(lens, dtype=torch.int32)
        self.seq_lens_sum = sum(lens)
        # KV slots of the committed prefix (any distinct numbers)
        for i, n in enumerate(lens):
            self.req_to_token[int(self.req_pool_indices[i]), :n] = torch.arange(n) + 100 * (i + 1)

    def batch_size(self):
        return len(self.reqs)


def run_step(sg, prompts, prior_outputs, max_new, ranks, budget=9, topk=3, depth=6, builder="device", counter=None,
             walker=False):  # fmt: skip
    """Draft (oracle-steered) -> tree -> prepare_for_verify -> toy target -> verify (inside `counter`, a
    context manager, when given: benchmarks/ddtree_step_ops.py counts the operators verify dispatches)."""
    du, dd = sg.ddtree_utils, sg.ddtree_device
    reqs = [Req(p, m) for p, m in zip(prompts, max_new, strict=True)]
    refs = []
    for req, prior in zip(reqs, prior_outputs, strict=True):
        req.output_ids = list(prior)
        seq = req.origin_input_ids + req.output_ids
        ref = []
        for _ in range(40):
            ref.append(toy_target(seq + ref))
        refs.append(req.output_ids + ref)
    # the committed prefix = prompt + outputs except the last (verified) token, whose KV is not in yet
    prefix_tokens = [r.origin_input_ids + r.output_ids[:-1] for r in reqs]
    alloc = Allocator()
    batch = Batch(reqs, prefix_tokens, alloc)

    g = torch.Generator().manual_seed(5)
    bs = len(reqs)
    lp, tk = du.topk_logprobs(torch.randn(bs * depth, VOCAB, generator=g), topk)
    lp, tk = lp.view(bs, depth, topk), tk.view(bs, depth, topk)
    oracle_ref = {tuple(r.origin_input_ids): ref for r, ref in zip(reqs, refs, strict=True)}
    true = []
    for r in reqs:
        full = oracle_ref[tuple(r.origin_input_ids)]
        n = len(r.output_ids)
        true.append([full[n + d] for d in range(depth)])
    lp, tk = du.apply_oracle_topk(lp, tk, true, ranks, du.DEFAULT_ORACLE_PROFILE, VOCAB)
    roots = torch.tensor([r.output_ids[-1] for r in reqs])
    tree_builder = dd.TreeBuilder(budget)
    if builder == "device":  # what the worker runs
        tree = tree_builder.build(lp, tk, roots, batch.seq_lens, topk)
    else:  # the test switch SGLANG_DDTREE_TREE_BUILDER=cpu
        ref = du.build_tree_batch(roots.tolist(), lp, tk, budget, topk)
        tree = dd.device_tree_from_batch(ref, "cpu", batch.seq_lens)
    width = tree.width
    stats = []

    vi = sg.ddtree_worker.DDTreeVerifyInput(
        draft_token=tree.tokens.reshape(-1),
        positions=tree.positions,
        draft_token_num=width,
        tree=tree,
        stats=stats,
        **({"walker": tree_builder.walk} if walker else {}),  # the worker hands its builder's walk (0105)
    )
    vi.prepare_for_verify(batch, 1, build_custom_mask=False)
    vi.custom_mask = dd.tree_mask_flat(tree.ancestors, batch.seq_lens, batch.seq_lens_cpu.tolist(),
                                       index=tree.mask_index)  # fmt: skip
    assert batch.out_cache_loc.numel() == bs * width
    verify_locs = batch.out_cache_loc.clone()

    # the toy target forward: each slot sees the prefix and the slots the mask allows
    logits = torch.full((bs * width, VOCAB), -1.0)
    hidden = torch.zeros((bs * width, 3))
    off = 0
    for b in range(bs):
        p = len(prefix_tokens[b])
        block = vi.custom_mask[off : off + width * (p + width)].view(width, p + width)
        off += width * (p + width)
        for q in range(width):
            vis = [k for k in range(width) if block[q, p + k]]
            ctx = prefix_tokens[b] + [
                int(tree.tokens[b, k]) for k in sorted(vis, key=lambda k: int(tree.depths[b, k]))
            ]
            logits[b * width + q, toy_target(ctx)] = 5.0
            hidden[b * width + q] = torch.tensor([b, q, int(tree.tokens[b, q])], dtype=torch.float)
    out = types.SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
    seq_before = batch.seq_lens.clone()
    with HostReads() as reads, (counter or contextlib.nullcontext()):
        res = vi.verify(batch=batch, logits_output=out, page_size=1)
    assert reads.device_reads == ["cpu"], reads.device_reads  # one device->host copy per step
    assert stats == [(int(tree.num_nodes.sum()), int(tree.max_depth.max()))]
    return types.SimpleNamespace(
        reqs=reqs, refs=refs, tree=tree, batch=batch, alloc=alloc, res=res, width=width,
        verify_locs=verify_locs, seq_before=seq_before, prior=prior_outputs, out=out, vi=vi,
    )  # fmt: skip


class HostReads(torch.overrides.TorchFunctionMode):
    """Records the patched sglang code's reads of tensor values into Python.

    On CPU every tensor is a host tensor, so it counts the calls that would read a GPU tensor:
    .cpu()/.item()/.tolist()/bool()/int()/float()/numpy() made from the patched files (not from
    this test's stand-ins); .tolist() of the tensor a .cpu() returned is the host reading its own
    copy and is not counted."""

    READS = frozenset({"cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy"})

    def __init__(self):
        super().__init__()
        self.device_reads = []
        self._copies = set()

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in self.READS and args and isinstance(args[0], torch.Tensor) and _called_from_sglang():
            if id(args[0]) not in self._copies:
                self.device_reads.append(name)
            if name == "cpu":
                self._copies.add(id(out))
        return out


def _called_from_sglang():
    frame = sys._getframe(2)
    while frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename:
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith("sglang/")


def check_step(s, expect_accepts):
    new_verified, commit_lens, next_hidden, accepted = s.res
    width = s.width
    assert accepted == expect_accepts
    kept_slots = []
    for b, req in enumerate(s.reqs):
        n_prior = len(s.prior[b])
        commit = int(commit_lens[b])
        assert req.output_ids == s.refs[b][: n_prior + commit]  # the target's own greedy tokens
        assert int(new_verified[b]) == req.output_ids[-1]
        assert req.spec_verify_ct == 1 and req.spec_accepted_drafts == max(0, commit - 1)
        # the req->token table: the accepted path's slots (root first), in sequence order
        p = int(s.seq_before[b])
        row = s.batch.req_to_token[int(s.batch.req_pool_indices[b])]
        locs = row[p : p + commit].tolist()
        slots = [loc - int(s.verify_locs[b * width]) for loc in locs]
        assert slots[0] == 0
        assert [s.tree.depths[b, k].item() for k in slots] == list(range(commit))  # one slot per depth
        for a, c in itertools.pairwise(slots):
            assert int(s.tree.parents[b, c]) == a  # each kept slot is the previous one's child
        # what a hybrid target's state commit reads (0103, from the walk's host copy since 0104): the same path, slot by slot
        assert s.vi.accepted_paths[b][:commit] == slots and s.vi.commit_lens_host[b] == commit
        # the hidden states handed to the draft: those slots, in order
        rows = next_hidden[sum(int(x) for x in commit_lens[:b]) :][:commit]
        assert rows[:, 0].tolist() == [float(b)] * commit and rows[:, 1].tolist() == [float(k) for k in slots]
        assert int(s.batch.seq_lens[b]) == p + commit
        kept_slots += locs
    assert s.out.hidden_states is None  # released like DFlash does
    assert sorted(kept_slots + s.alloc.freed) == s.verify_locs.tolist()  # everything else freed
    assert s.batch.out_cache_loc.tolist() == kept_slots
    assert s.batch.seq_lens_sum == int(s.seq_before.sum()) + int(commit_lens.sum())


@pytest.mark.parametrize("builder", ["device", "cpu"])
def test_verify_accepts_through_non_first_branches_batch_of_two(sg, builder):
    # request 0: true tokens at ranks 0,1,0,0 (a non-first child at depth 2);
    # request 1: a different prompt and history
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0], builder=builder)
    check_step(s, [s.res[3][0], s.res[3][1]])
    assert min(s.res[3]) >= 2  # several drafts accepted per request, through rank-1 nodes
    assert all((s.tree.ranks[b] == 1).any() for b in range(2))


def test_the_test_only_broken_commit_keeps_the_wrong_kv_slots(sg, tmp_path, monkeypatch):
    """The control of the GPU lossless check: SGLANG_DDTREE_TEST_BREAK=<file> saying 'kv'."""
    flag = tmp_path / "break"
    flag.write_text("kv\n")
    monkeypatch.setenv("SGLANG_DDTREE_TEST_BREAK", str(flag))
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0])
    with pytest.raises(AssertionError):
        check_step(s, [s.res[3][0], s.res[3][1]])
    flag.unlink()  # file gone: the switch is off again
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0])
    check_step(s, [s.res[3][0], s.res[3][1]])


def test_verify_through_the_builders_walk(sg):
    """What the worker runs since 0105: verify walks with the builder's walk (eager on CPU), same result."""
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0], walker=True)
    check_step(s, [s.res[3][0], s.res[3][1]])
    assert min(s.res[3]) >= 2


def test_verify_nothing_accepted(sg):
    s = run_step(sg, [[1, 2, 3]], [[4]], [40], ranks=[5, 5])  # true token never in the top-3
    check_step(s, [0])
    assert int(s.res[1][0]) == 1  # only the bonus token


@pytest.mark.parametrize("builder", ["device", "cpu"])
def test_verify_request_finishing_mid_path(sg, builder):
    # 2 more tokens allowed: the commit stops there although more of the path was accepted
    s = run_step(sg, [[5, 6, 7], [2, 3]], [[11], [1]], [3, 40], ranks=[0, 0, 0, 0], builder=builder)
    assert int(s.res[1][0]) == 2 and int(s.res[1][1]) == 5
    check_step(s, [1, 4])


class Sampling:
    """The SamplingBatchInfo fields the verify path reads (one entry per request)."""

    def __init__(self, temperatures, top_ks, top_ps):
        self.temperatures = torch.tensor(temperatures, dtype=torch.float).view(-1, 1)
        self.top_ks = torch.tensor(top_ks, dtype=torch.int32)
        self.top_ps = torch.tensor(top_ps, dtype=torch.float)
        self.is_all_greedy = all(k == 1 for k in top_ks)
        self.has_custom_logit_processor = False
        self.penalizer_orchestrator = types.SimpleNamespace(is_required=False)
        self.logit_bias = None

    def __len__(self):
        return self.top_ks.numel()


def test_sampling_per_slot(sg):
    sample = sg.ddtree_worker._sample_per_slot
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1, 0.0]] * 3 + [[0.1, 0.1, 0.5, 0.3]] * 3))
    # request 0 greedy (top-k 1), request 1 sampled with top-p 0.75 (keeps tokens 2 and 3 only)
    info = Sampling([1.0, 1.0], [1, -1], [1.0, 0.75])
    draws = torch.stack([sample(logits, info, 3) for _ in range(400)])
    assert (draws[:, :3] == 0).all()  # greedy rows: the argmax, always
    seen = draws[:, 3:].reshape(-1)
    assert set(seen.tolist()) == {2, 3}
    share = (seen == 2).float().mean().item()
    assert abs(share - 0.5 / 0.8) < 0.06  # renormalised over the kept tokens


def test_verify_with_sampling_is_the_target_walk(sg, monkeypatch):
    """Non-greedy: the tokens drawn per slot are walked through the tree like greedy ones."""
    drawn = {}

    def fake_sample(logits, sampling_info, width):
        out = torch.argmax(logits, dim=-1)  # this toy target is deterministic
        drawn["n"] = int(out.numel())
        return out

    monkeypatch.setattr(sg.ddtree_worker, "_sample_per_slot", fake_sample)
    orig_init = Batch.__init__

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        self.sampling_info = Sampling([0.7] * len(self.reqs), [20] * len(self.reqs), [0.9] * len(self.reqs))

    monkeypatch.setattr(Batch, "__init__", init)
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0])
    assert drawn["n"] == 2 * s.width  # one draw per verify slot
    check_step(s, [s.res[3][0], s.res[3][1]])
    assert min(s.res[3]) >= 2


class Backend:
    """Records what the hybrid commit hands sglang's update_mamba_state_after_mtp_verify."""

    def __init__(self):
        self.calls = []

    def update_mamba_state_after_mtp_verify(self, accepted_steps, mamba_track_indices, mamba_steps_to_track, model):
        self.calls.append((accepted_steps.tolist(), None if mamba_steps_to_track is None else mamba_steps_to_track.tolist()))


def hybrid_commit(sg, s, interval, track=True, counter=None):
    """DDTreeWorker._update_target_mamba_state_after_verify after run_step's verify, on a stand-in worker:
    returns (accepted state slots, tracking slots) as the backend received them."""
    backend = Backend()
    worker = types.SimpleNamespace(
        target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(attn_backend=backend, model=None)),
        server_args=types.SimpleNamespace(mamba_track_interval=interval))  # fmt: skip
    s.batch.spec_info = s.vi
    s.batch.mamba_track_indices = torch.arange(len(s.reqs)) if track else None
    with counter or contextlib.nullcontext():
        sg.ddtree_worker.DDTreeWorker._update_target_mamba_state_after_verify(
            worker, batch=s.batch, seq_lens_pre_verify=s.seq_before, commit_lens=s.res[1])
    return backend.calls[0]


@pytest.mark.parametrize("interval", [1, 4, 16])
def test_hybrid_commit_hands_the_accepted_node_and_tracking_slots_to_the_backend(sg, interval):
    """The commit a hybrid target runs after verify: per request the accepted path's last committed slot,
    and the slot of the tracking point the step crossed (-1 where none), from the walk's host copy."""
    s = run_step(sg, [[5, 6, 7], [9, 9, 2, 4, 1]], [[11], [3, 8]], [40, 40], ranks=[0, 1, 0, 0])
    steps, track = hybrid_commit(sg, s, interval)
    for b in range(2):
        n = int(s.res[1][b])
        pre = int(s.seq_before[b])
        path = s.vi.accepted_paths[b]
        assert steps[b] == path[n - 1] and int(s.tree.ranks[b, path[n - 1]]) >= 0
        point = (pre + n) // interval * interval
        assert track[b] == (path[point - pre - 1] if point > pre else -1)
    assert any(int(s.tree.ranks[b, p]) == 1 for b in range(2) for p in s.vi.accepted_paths[b])  # off the first chain
    assert hybrid_commit(sg, s, interval, track=False)[1] is None
