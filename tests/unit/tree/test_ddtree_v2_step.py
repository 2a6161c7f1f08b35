"""DDTREE decode steps on sglang's spec-v2 worker (0.5.17 on), through the real patched code, on CPU.

The files under test come from the version's series applied to its pinned wheel (tests/sglang_trees.py):
`ddtree_worker_v2.py` (DDTreeWorkerV2._forward_decode: tree, mask, walk, commit order, req_to_token
reorder, draft KV append, hybrid state commit), `ddtree_commit.py`, `ddtree_spec.py`, `ddtree_device.py`,
`ddtree_hybrid.py`, `ddtree_utils.py`, sglang's own `dflash_info.py` (DFlashVerifyInput.prepare_for_verify),
`spec_info.py` and `spec_registry.py`. What needs a GPU build of sglang is a small stand-in written here:
DFLASH's worker base (its draft phase `_run_draft_block` gives a toy draft block whose top-k holds the
target's true continuation at chosen ranks, and it records the draft KV append), ForwardBatch.init_new,
and a toy target whose greedy next token depends on every token its verify slot sees through the tree
mask (so a wrong mask or position changes it). The spec-v2 scheduler is played by the test: it reserves
each request's KV slots ahead in req_to_token, commits each step's first accept_len tokens, and keeps a
KV store of what every slot holds (written by the target's forward at out_cache_loc).

Checked over many steps and batches: the emitted tokens are the target's own greedy continuation (the
commit is lossless), each request's req_to_token positions below its length name slots holding exactly
that position's token (the reorder puts the accepted path in sequence order, also off the first branch),
the reserved slot set never changes, the draft KV append gets the accepted path's hidden states at
those slots and positions, hybrid targets commit the accepted node's state slot, and the test-only
broken commits ('kv', 'state') are caught by the same checks.
"""

from __future__ import annotations

import ast
import inspect
import random
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="CPU torch is not installed: scripts/controller.sh installs it")

from sglang_trees import built_tree, sglang_modules
from sglang_wheel import versions

V2_VERSIONS = [v for v in versions() if v != "0.5.11"]
VOCAB = 48
SPEC = "sglang.srt.speculative"


def target_next(seq):
    """The toy target's greedy token after ``seq`` (every token and the length matter)."""
    h = len(seq) * 31
    for i, t in enumerate(seq[-6:]):
        h = (h * 17 + (t + 1) * (i + 3)) % 1000003
    return h % VOCAB


def _mod(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


class Result:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))


class KVLocPlan:
    """sglang 0.5.23's KV location plan, for a pool whose physical ids are its virtual ids."""

    def __init__(self, req_pool_indices, write_virtual):
        self.req_pool_indices = req_pool_indices
        self.write_virtual = write_virtual

    def write_ids(self, reader=None, *, cols=None):
        if cols is None:
            return self.write_virtual
        bs = int(self.req_pool_indices.numel())
        return self.write_virtual.view(bs, -1)[:, cols].reshape(-1)

    def bind(self, batch, reader, *, cols=None):
        batch.kv_loc_plan = self
        batch.out_cache_loc = self.write_ids(reader, cols=cols)


def stand_ins(world):
    """Stand-ins for the modules ddtree_worker_v2 imports that need a GPU build; `world` is the test's state."""

    class CaptureHiddenMode:
        NULL, FULL = 0, 2

    class Mode:
        def __init__(self, name):
            self.name = name

        def is_idle(self):
            return self.name == "idle"

    class ForwardMode:
        TARGET_VERIFY, IDLE, DECODE = Mode("target_verify"), Mode("idle"), Mode("decode")

    class ForwardBatch:
        @staticmethod
        def init_new(
            batch, model_runner, capture_hidden_mode=None, return_hidden_states_before_norm=False,
            kv_loc_plan=None, write_cols=None,
        ):  # fmt: skip
            fb = types.SimpleNamespace(
                input_ids=batch.input_ids,
                spec_info=batch.spec_info,
                seq_lens=batch.seq_lens,
                req_pool_indices=batch.req_pool_indices,
                out_cache_loc=batch.out_cache_loc,
                seq_lens_cpu=batch.seq_lens_cpu,
                capture_hidden_mode=capture_hidden_mode,
            )
            if kv_loc_plan is not None:  # 0.5.23: the iteration's plan gives the write ids
                kv_loc_plan.bind(fb, None, cols=write_cols)
            return fb

    class DFlashDraftInputV2:
        def __init__(self, bonus_tokens, new_seq_lens):
            self.bonus_tokens = bonus_tokens
            self.new_seq_lens = new_seq_lens
            self.reserved_seq_lens_cpu = self.nxt_kv_lens_cpu = None  # 0.5.17 / 0.5.23 names
            self.reserved_seq_lens_sum = self.nxt_kv_lens_sum = None

    class DFlashWorkerV2:
        """DFLASH's spec-v2 worker, reduced to what DDTreeWorkerV2 inherits: its state, a toy draft
        phase and the draft KV append (recorded)."""

        def __init__(self, server_args, gpu_id, *rest):
            from sglang.srt.speculative.ddtree_commit import DeviceOracle, StepTiming
            from sglang.srt.speculative.ddtree_utils import Oracle

            # 0.5.17: (server_args, gpu_id, ps, nccl_port, target_worker); 0.5.23: no ps
            if len(rest) == 3:
                ps, target_worker = rest[0], rest[2]
            else:
                ps, target_worker = types.SimpleNamespace(tp_rank=0), rest[1]
            self.server_args = server_args
            self.ps = ps
            self._target_tp_rank = ps.tp_rank
            self.device = torch.device("cpu")
            self._target_worker = target_worker
            self.model_runner = target_worker.model_runner
            self.block_size = int(server_args.speculative_num_draft_tokens)
            self.page_size = 1
            self._oracle = Oracle.from_env()
            self._device_oracle = DeviceOracle()
            self._step_timing = StepTiming("DDTREE", ps.tp_rank)
            self._need_mamba_verify_commit = False
            self.append = Recorder()

        def init_attention_backends(self):
            # as sglang's: called once the target's attention backend exists (after the memory pools)
            self._need_mamba_verify_commit = mambaish_config(
                self.model_runner.model_config
            ) is not None and hasattr(self.model_runner.attn_backend, "update_mamba_state_after_mtp_verify")

        @property
        def target_worker(self):
            return self._target_worker

        def _run_draft_block(self, batch, draft_input):
            return world.draft_block(self, batch, draft_input)

        def _append_target_hidden_to_draft_kv_by_loc(self, **kw):
            self.append(**kw)

        def _draft_write_ids(self, plan):  # 0.5.23: the draft pool's ids of the plan's window
            return plan.write_ids(None)

        def _make_next_draft_input_decode(self, *, bonus_tokens, new_seq_lens):
            return DFlashDraftInputV2(bonus_tokens, new_seq_lens)

    def mambaish_config(model_config):
        # sglang's: the model's linear-attention config (Qwen3.5, Qwen3-Next, Mamba2, ...) or None
        return model_config.hybrid_config

    def apply_dflash_verify_logits_adjustments(*, next_token_logits, sampling_info, draft_token_num):
        assert next_token_logits.shape[0] == len(sampling_info) * draft_token_num

    def resolve_dflash_verify_mask_policy(backend):
        # as sglang's: a hybrid backend's full-attention part names the backend
        while getattr(backend, "full_attn_backend", None) is not None:
            backend = backend.full_attn_backend
        return type(backend).__name__, False

    return {
        "sglang.kernels": _mod("sglang.kernels"),
        "sglang.kernels.ops": _mod("sglang.kernels.ops"),
        "sglang.kernels.ops.attention": _mod("sglang.kernels.ops.attention"),
        "sglang.kernels.ops.attention.utils": _mod(
            "sglang.kernels.ops.attention.utils", create_flashinfer_kv_indices_triton=None
        ),
        "sglang.srt.configs": _mod("sglang.srt.configs", __path__=[]),
        "sglang.srt.configs.hybrid_arch": _mod(
            "sglang.srt.configs.hybrid_arch", mambaish_config=mambaish_config
        ),
        "sglang.srt.distributed": _mod(
            "sglang.srt.distributed", get_tp_group=lambda: types.SimpleNamespace(world_size=1)
        ),
        "sglang.srt.managers": _mod("sglang.srt.managers"),
        "sglang.srt.managers.schedule_batch": _mod(
            "sglang.srt.managers.schedule_batch", ScheduleBatch=object
        ),
        "sglang.srt.managers.scheduler": _mod("sglang.srt.managers.scheduler", GenerationBatchResult=Result),
        "sglang.srt.model_executor": _mod("sglang.srt.model_executor"),
        "sglang.srt.model_executor.forward_batch_info": _mod(
            "sglang.srt.model_executor.forward_batch_info",
            CaptureHiddenMode=CaptureHiddenMode,
            ForwardMode=ForwardMode,
            ForwardBatch=ForwardBatch,
        ),
        "sglang.srt.runtime_context": _mod(
            "sglang.srt.runtime_context",
            get_exec=lambda: types.SimpleNamespace(
                mamba=types.SimpleNamespace(mamba_track_interval=world.interval)
            ),
            get_server_args=lambda: world.server_args,
            get_spec=lambda: world.server_args,
            get_parallel=lambda: types.SimpleNamespace(
                tp_group=types.SimpleNamespace(world_size=1), tp_rank=0, attn_dp_enabled=False
            ),
            mamba_track_grid=lambda page_size: world.interval,
        ),
        # 0.5.23's imports beside 0.5.17's
        "sglang.srt.arg_groups": _mod("sglang.srt.arg_groups", __path__=[]),
        "sglang.srt.arg_groups.overrides": _mod(
            "sglang.srt.arg_groups.overrides", resolving_view=lambda a: a, resolved_view=lambda a: a
        ),
        "sglang.srt.mem_cache": _mod("sglang.srt.mem_cache", __path__=[]),
        "sglang.srt.mem_cache.kv_index_translator": _mod(
            "sglang.srt.mem_cache.kv_index_translator", KVIndexTranslator=object
        ),
        "sglang.srt.mem_cache.kv_loc_plan": _mod(
            "sglang.srt.mem_cache.kv_loc_plan",
            KVLocPlan=KVLocPlan,
            Cols=object,
            IdSpaceKind=types.SimpleNamespace(FULL="full"),
        ),
        "sglang.srt.utils": _mod("sglang.srt.utils", is_npu=lambda: False),
        "sglang.srt.layers.logprob_processor": _mod(
            "sglang.srt.layers.logprob_processor",
            compute_spec_logprobs=lambda *a, **kw: world.logprobs(*a, **kw),
        ),
        f"{SPEC}.dflash_info_v2": _mod(f"{SPEC}.dflash_info_v2", DFlashDraftInputV2=DFlashDraftInputV2),
        f"{SPEC}.dflash_utils": _mod(
            f"{SPEC}.dflash_utils",
            apply_dflash_verify_logits_adjustments=apply_dflash_verify_logits_adjustments,
            resolve_dflash_verify_mask_policy=resolve_dflash_verify_mask_policy,
        ),
        f"{SPEC}.dflash_worker_v2": _mod(f"{SPEC}.dflash_worker_v2", DFlashWorkerV2=DFlashWorkerV2),
        f"{SPEC}.spec_utils": _mod(
            f"{SPEC}.spec_utils",
            GrammarTree=None,
            build_grammar_vocab_mask=None,
            prepare_mamba_track_for_verify=lambda batch: None,
        ),
    }


class TritonAttnBackend:  # the name the worker checks for a tree-mask attention backend
    def init_forward_metadata(self, forward_batch):
        pass


class GDNAttnBackend:  # a hybrid target's linear-attention backend after 0103 (tree path: topk 2)
    topk = 2


class HybridBackend:  # sglang's HybridLinearAttnBackend: full attention + a linear-attention backend
    def __init__(self):
        self.full_attn_backend = TritonAttnBackend()
        self.linear_attn_backend = GDNAttnBackend()
        self.commits = []

    def init_forward_metadata(self, forward_batch):
        pass

    def update_mamba_state_after_mtp_verify(self, **kw):
        self.commits.append(kw)


class World:
    """The test's scheduler, target and draft: requests, their KV reservations, a KV store."""

    def __init__(self, seed, bs, budget, topk, block, hybrid=False, interval=8):
        self.rng = random.Random(seed)
        self.hybrid = hybrid
        self.interval = interval
        self.block = block
        self.budget = budget
        self.server_args = types.SimpleNamespace(
            speculative_algorithm="DDTREE",
            speculative_ddtree_budget=budget,
            speculative_ddtree_topk=topk,
            speculative_ddtree_mode="tree",
            speculative_num_draft_tokens=block,
            page_size=1,
            disable_cuda_graph=True,
            disable_overlap_schedule=False,
        )
        self.rows = 64
        self.req_to_token = torch.zeros((bs + 3, self.rows), dtype=torch.int32)
        self.pool_rows = torch.tensor(self.rng.sample(range(bs + 3), bs), dtype=torch.int64)
        slots = self.rng.sample(range(10_000, 10_000 + (bs + 3) * self.rows), (bs + 3) * self.rows)
        self.req_to_token[:] = torch.tensor(slots, dtype=torch.int32).view(bs + 3, self.rows)
        self.reserved = {int(r): set(self.req_to_token[r].tolist()) for r in self.pool_rows}
        self.kv = {}  # slot -> (position, token) as the target wrote it
        self.seqs = []
        self.return_logprob = False
        for b in range(bs):
            prompt = [self.rng.randrange(VOCAB) for _ in range(self.rng.randint(3, 9))]
            r = int(self.pool_rows[b])
            for p, t in enumerate(prompt):
                self.kv[int(self.req_to_token[r, p])] = (p, t)
            self.seqs.append(prompt + [target_next(prompt)])  # the prefill's token: the first root
        self.backend = HybridBackend() if hybrid else TritonAttnBackend()
        runner = types.SimpleNamespace(
            attn_backend=self.backend,
            req_to_token_pool=types.SimpleNamespace(req_to_token=self.req_to_token),
            model_config=types.SimpleNamespace(
                context_len=4096, vocab_size=VOCAB, hybrid_config=types.SimpleNamespace() if hybrid else None
            ),
            decode_cuda_graph_runner=None,
            model=None,
        )
        self.target = types.SimpleNamespace(model_runner=runner, device="cpu")
        self.target.forward_batch_generation = self.target_forward
        self.logprob_calls = []

    def logprobs(self, batch, logits_output, predict, *, chain_stride=None, accept_index=None):
        """sglang 0.5.23's compute_spec_logprobs, recorded (the rows must be the emitted tokens' chain)."""
        self.logprob_calls.append((logits_output.next_token_logits.clone(), predict.clone(), chain_stride))

    # ---- the draft
    def draft_block(self, worker, batch, draft_input):
        bs, block = len(self.seqs), self.block
        prefix = batch.seq_lens
        rows = batch.req_pool_indices.view(bs, 1)
        cols = prefix.view(bs, 1) + torch.arange(block).view(1, block)
        hidden = torch.randn(
            bs, block, VOCAB, generator=torch.Generator().manual_seed(self.rng.randrange(1 << 30))
        )
        for b in range(bs):
            cont = list(self.seqs[b])
            for d in range(1, block):
                true = target_next(cont)
                rank = self.rng.choice([0, 0, 0, 1, 2, 5])  # where the draft ranks the target's token
                order = hidden[b, d].argsort(descending=True).tolist()
                order.remove(true)
                order.insert(rank, true)
                hidden[b, d, torch.tensor(order)] = torch.linspace(8.0, 0.0, VOCAB)
                cont.append(true)
        loc2d = self.req_to_token[rows, cols].to(torch.int64)
        return types.SimpleNamespace(
            bs=bs,
            device=torch.device("cpu"),
            kv_loc_plan=KVLocPlan(batch.req_pool_indices, loc2d.reshape(-1)),
            lm_head=types.SimpleNamespace(weight=torch.eye(VOCAB)),
            block_ids=None,
            prefix_lens=prefix,
            positions_2d=cols,
            positions=cols.reshape(-1),
            verify_out_cache_loc_2d=loc2d,
            verify_out_cache_loc=None,
            draft_out=None,
            draft_logits_output=types.SimpleNamespace(hidden_states=hidden.reshape(bs * block, VOCAB)),
        )

    # ---- the target: what each verify slot sees through the mask decides its token
    def target_forward(self, batch=None, forward_batch=None, is_verify=False, skip_attn_backend_init=False):
        fb = forward_batch
        spec = fb.spec_info
        w = int(spec.draft_token_num)
        bs = len(self.seqs)
        toks = fb.input_ids.view(bs, w).tolist()
        pos = spec.positions.view(bs, w).tolist()
        self.last_verify = (toks, pos)  # the verify slots' tokens and positions (best-first order)
        mask = spec.custom_mask
        logits = torch.zeros((bs * w, VOCAB))
        hidden = torch.zeros((bs * w, 3))
        start = 0
        for b in range(bs):
            pre = int(fb.seq_lens[b])
            committed = self.seqs[b][:pre]
            for q in range(w):
                row = mask[start + q * (pre + w) : start + (q + 1) * (pre + w)]
                assert bool(row[:pre].all()), "every verify slot sees the whole prefix"
                seen = sorted((pos[b][k], toks[b][k]) for k in range(w) if bool(row[pre + k]))
                assert [p for p, _ in seen] == list(range(pre, pre + len(seen))), (
                    "ancestors at consecutive positions"
                )
                assert seen[-1] == (pos[b][q], toks[b][q])
                logits[b * w + q, target_next(committed + [t for _, t in seen])] = 10.0
                hidden[b * w + q] = torch.tensor([pos[b][q], toks[b][q], b], dtype=torch.float32)
                self.kv[int(fb.out_cache_loc[b * w + q])] = (pos[b][q], toks[b][q])
            start += w * (pre + w)
        out = types.SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
        return types.SimpleNamespace(logits_output=out, can_run_cuda_graph=False)

    # ---- the scheduler's commit and the checks
    def batch(self):
        lens = torch.tensor([len(s) - 1 for s in self.seqs], dtype=torch.int64)  # the root is not in KV
        return types.SimpleNamespace(
            seq_lens=lens,
            seq_lens_cpu=lens.clone(),
            seq_lens_sum=int(lens.sum()),
            req_pool_indices=self.pool_rows,
            reqs=[types.SimpleNamespace(origin_input_ids=s[:3]) for s in self.seqs],
            has_grammar=False,
            sampling_info=None,
            mamba_track_indices=torch.arange(len(self.seqs)) if self.hybrid else None,
            tree_cache=types.SimpleNamespace(page_size=1),
            return_logprob=self.return_logprob,
            out_cache_loc=None,
            forward_mode=types.SimpleNamespace(is_idle=lambda: False),
        )

    def check_kv(self):
        for b, seq in enumerate(self.seqs):
            r = int(self.pool_rows[b])
            assert set(self.req_to_token[r].tolist()) == self.reserved[r], "the reserved slots changed"
            for p in range(len(seq) - 1):
                assert self.kv.get(int(self.req_to_token[r, p])) == (p, seq[p]), f"request {b} position {p}"


def construct(worker_cls, world):
    if "ps" in inspect.signature(worker_cls.__init__).parameters:  # 0.5.17
        return worker_cls(world.server_args, 0, types.SimpleNamespace(tp_rank=0), 0, world.target)
    return worker_cls(world.server_args, 0, 0, world.target)  # 0.5.23


def make_worker(worker_cls, world):
    """The worker as sglang's scheduler brings it up (Scheduler.init_model_worker, 0.5.17 and 0.5.23):
    the target and draft workers are built, then the memory pools, and only then the attention backends
    (the target's, then the draft worker's init_attention_backends). The target's ModelRunner has no
    attn_backend attribute while the worker is built."""
    runner = world.target.model_runner
    backend = runner.attn_backend
    del runner.attn_backend
    try:
        worker = construct(worker_cls, world)
    finally:
        runner.attn_backend = backend
    worker.init_attention_backends()
    return worker


def run_steps(worker_cls, world, steps):
    worker = make_worker(worker_cls, world)
    bonus = torch.tensor([s[-1] for s in world.seqs], dtype=torch.int64)
    width = world.budget + 1
    for _ in range(steps):
        batch = world.batch()
        prefix = batch.seq_lens.clone()
        draft_input = types.SimpleNamespace(bonus_tokens=bonus, reserved_seq_lens_cpu=None)
        res = worker._forward_decode(batch, draft_input)
        assert res.speculative_num_draft_tokens == width
        lens = res.accept_lens.tolist()
        out = res.next_token_ids.view(-1, width).tolist()
        for b, n in enumerate(lens):
            assert 1 <= n <= width
            expected = []
            for _ in range(n):
                expected.append(target_next(world.seqs[b] + expected))
            assert out[b][:n] == expected, "the emitted tokens are the target's greedy continuation"
            world.seqs[b] += expected
            if n > 1 and any(out[b][i] != 0 for i in range(n, width)):
                pass
        assert res.new_seq_lens.tolist() == (prefix + res.accept_lens).tolist()
        assert res.next_draft_input.bonus_tokens.tolist() == [s[-1] for s in world.seqs]
        bonus = res.next_draft_input.bonus_tokens
        # the draft KV append: the accepted path's hidden states, in sequence order, at its slots
        kw = worker.append.calls[-1][1]
        loc2d, commit = kw["cache_loc_2d"], kw["commit_lens"].tolist()
        hid = kw["target_hidden"].view(len(lens), width, 3)
        for b, n in enumerate(commit):
            r = int(world.pool_rows[b])
            p0 = int(prefix[b])
            assert loc2d[b, :n].tolist() == world.req_to_token[r, p0 : p0 + n].tolist()
            assert [tuple(int(x) for x in hid[b, j, :2].tolist()) for j in range(n)] == [
                (p0 + j, world.seqs[b][p0 + j]) for j in range(n)
            ]
            assert kw["positions"].view(-1, width)[b, :n].tolist() == list(range(p0, p0 + n))
        yield worker, res, prefix


@pytest.fixture(scope="module", params=V2_VERSIONS)
def v2(request, tmp_path_factory):
    """The version's patched tree, its modules imported with the stand-ins (a namespace per module)."""
    version = request.param
    tree = built_tree(version, tmp_path_factory.mktemp("trees"))["tree"]["path"]
    holder = types.SimpleNamespace(world=None)

    class Proxy:
        def __getattr__(self, name):
            return getattr(holder.world, name)

    with sglang_modules(tree, stand_ins(Proxy())) as import_module:
        mods = types.SimpleNamespace(
            worker=import_module(f"{SPEC}.ddtree_worker_v2"),
            commit=import_module(f"{SPEC}.ddtree_commit"),
            spec=import_module(f"{SPEC}.ddtree_spec"),
            utils=import_module(f"{SPEC}.ddtree_utils"),
            version=version,
            holder=holder,
        )
        yield mods


def steps(v2, world, n):
    """The steps one at a time (the checks of each iteration see that step's state)."""
    v2.holder.world = world
    return run_steps(v2.worker.DDTreeWorkerV2, world, n)


@pytest.mark.parametrize("seed", range(4))
def test_steps_are_lossless_and_the_kv_is_in_sequence_order(v2, seed):
    rng = random.Random(seed)
    world = World(
        seed, bs=rng.randint(1, 4), budget=rng.choice([3, 7, 15]), topk=rng.choice([2, 4, 8]), block=16
    )
    for worker, res, _ in steps(v2, world, 10):
        world.check_kv()
    assert any(len(s) > 20 for s in world.seqs), "the trees were accepted beyond the root"


def test_budget_one_and_a_small_block(v2):
    world = World(7, bs=3, budget=1, topk=2, block=4)
    for _ in steps(v2, world, 12):
        world.check_kv()


def test_an_accepted_path_off_the_first_branch_keeps_its_kv(v2, monkeypatch):
    # a draft that ranks the target's token second at every depth: the accepted path leaves the first branch
    world = World(11, bs=2, budget=15, topk=4, block=16)
    world.rng.choice = lambda seq: 1 if 5 in seq else seq[0]
    moved = False
    for _, res, prefix in steps(v2, world, 6):
        world.check_kv()
        moved |= any(n > 2 for n in res.accept_lens.tolist())
    assert moved


def test_the_broken_kv_commit_is_caught(v2, tmp_path, monkeypatch):
    flag = tmp_path / "break"
    flag.write_text("kv")
    monkeypatch.setenv("SGLANG_DDTREE_TEST_BREAK", str(flag))
    world = World(11, bs=2, budget=15, topk=4, block=16)
    world.rng.choice = lambda seq: 1 if 5 in seq else seq[0]
    # the chain layout's slots: the KV (and the draft's appended states) no longer match the sequence
    with pytest.raises(AssertionError):
        for _ in steps(v2, world, 6):
            world.check_kv()


def test_hybrid_targets_commit_the_accepted_nodes_state(v2):
    world = World(5, bs=3, budget=15, topk=4, block=16, hybrid=True, interval=8)
    world.rng.choice = lambda seq: 1 if 5 in seq else seq[0]
    crossings = 0
    for worker, res, prefix in steps(v2, world, 8):
        commit = world.backend.commits[-1]
        n = res.accept_lens.tolist()
        steps_ = commit["last_correct_step_indices"].tolist()
        track = commit["mamba_steps_to_track"].tolist()
        assert commit["mamba_track_indices"] is not None and commit["model"] is None
        toks, pos = world.last_verify
        for b in range(len(n)):
            p0 = int(prefix[b])
            # the committed state is the verify slot of the last committed path position
            last = p0 + n[b] - 1
            assert (pos[b][steps_[b]], toks[b][steps_[b]]) == (last, world.seqs[b][last])
            point = (p0 + n[b]) // 8 * 8
            if p0 // 8 != (p0 + n[b]) // 8:
                # the tracking point's state: the slot after whose token `point` tokens are in
                crossings += 1
                assert (pos[b][track[b]], toks[b][track[b]]) == (point - 1, world.seqs[b][point - 1])
            else:
                assert track[b] == -1
    assert crossings, "no tracking point was crossed"


def test_hybrid_state_slot_is_the_path_slot(v2):
    # the same through the functions: accepted_state_slots of the walk's path, not commit_len - 1
    world = World(3, bs=2, budget=15, topk=4, block=16, hybrid=True)
    world.rng.choice = lambda seq: 1 if 5 in seq else seq[0]
    seen_branch = False
    for worker, res, prefix in steps(v2, world, 5):
        commit = world.backend.commits[-1]
        steps_ = commit["last_correct_step_indices"].tolist()
        n = res.accept_lens.tolist()
        seen_branch |= any(s != k - 1 for s, k in zip(steps_, n))
    assert seen_branch, "a path through a non-first branch commits a slot other than the chain position"


def test_the_broken_state_commit_takes_the_chain_position(v2, tmp_path, monkeypatch):
    flag = tmp_path / "break"
    flag.write_text("state")
    monkeypatch.setenv("SGLANG_DDTREE_TEST_BREAK", str(flag))
    world = World(3, bs=2, budget=15, topk=4, block=16, hybrid=True)
    world.rng.choice = lambda seq: 1 if 5 in seq else seq[0]
    for _, res, _ in steps(v2, world, 4):
        commit = world.backend.commits[-1]
        assert commit["last_correct_step_indices"].tolist() == [n - 1 for n in res.accept_lens.tolist()]


def test_the_device_oracle_agrees_with_the_host_reference(v2, tmp_path):
    import json

    ref_in, ref_out = [5, 6, 7], [9, 10, 11, 12, 13, 14]
    path = tmp_path / "oracle.json"
    path.write_text(
        json.dumps({"reference": [{"input_ids": ref_in, "output_ids": ref_out}], "ranks": [0, 1]})
    )
    oracle = v2.utils.Oracle(str(path))
    spec = oracle.refresh()
    dev = v2.commit.DeviceOracle()
    for n_out in range(1, len(ref_out) + 2):
        outputs = ref_out[:n_out]
        seq_len = len(ref_in) + len(outputs) - 1  # the current token is not in the KV cache yet
        host = oracle.true_tokens(ref_in, outputs, 4)
        table, plens = dev.rows(spec, [ref_in], 4, "cpu")
        current = torch.tensor([outputs[-1] if outputs else -1])
        got = v2.commit.DeviceOracle.true_tokens(table, plens, torch.tensor([seq_len]), current, 4)
        assert got.tolist() == [host]
    # a request that left the reference, or has none, is not steered
    table, plens = dev.rows(spec, [ref_in, [1, 2]], 3, "cpu")
    got = v2.commit.DeviceOracle.true_tokens(table, plens, torch.tensor([4, 2]), torch.tensor([99, 3]), 3)
    assert got.tolist() == [[-1, -1, -1], [-1, -1, -1]]


def test_server_argument_rules_keep_0_5_11s_messages(v2):
    def args(**kw):
        base = {
            "speculative_algorithm": "DDTREE", "speculative_ddtree_budget": 15, "speculative_ddtree_topk": 8,
            "speculative_ddtree_mode": "tree", "speculative_num_draft_tokens": 16, "page_size": 1,
            "attention_backend": "triton", "prefill_attention_backend": None, "decode_attention_backend": None,
            "speculative_attention_mode": "prefill",
        }  # fmt: skip
        base.update(kw)
        return types.SimpleNamespace(**base)

    handle = v2.spec.handle_ddtree_args
    handle(args())
    handle(args(speculative_ddtree_budget=31, speculative_num_draft_tokens=32))
    cases = [
        ({"speculative_ddtree_budget": 16}, "budget + 1 must not exceed the block size. Use --speculative-ddtree-budget 15 or less, or a DFlash draft trained with a block_size of at least 17."),
        ({"speculative_ddtree_budget": 31}, "--speculative-ddtree-budget=31 does not fit the DFlash block size 16"),
        ({"speculative_ddtree_budget": 0}, "DDTREE requires --speculative-ddtree-budget >= 1, got 0."),
        ({"speculative_ddtree_topk": "many"}, "DDTREE requires --speculative-ddtree-topk to be an integer, got 'many'."),
        ({"speculative_ddtree_mode": "bushy"}, "--speculative-ddtree-mode to be one of tree, shadow-linear, got 'bushy'."),
        ({"page_size": 16}, "DDTREE supports --page-size 1 only (got 16)"),
        ({"attention_backend": "fa3"}, "the verify would run on fa3. Pass --attention-backend triton."),
        ({"speculative_attention_mode": "decode", "decode_attention_backend": "trtllm_mha"}, "would run on trtllm_mha"),
        ({"speculative_use_rejection_sampling": True}, "--speculative-use-rejection-sampling"),
        ({"speculative_adaptive": True}, "--speculative-adaptive"),
        ({"enable_linear_replayssm_spec": True}, "--enable-linear-replayssm-spec"),
        ({"mamba_radix_cache_strategy": "extra_buffer_lazy"}, "extra_buffer_lazy"),
    ]  # fmt: skip
    for kw, message in cases:
        with pytest.raises(ValueError) as err:
            handle(args(**kw))
        assert message in str(err.value)
    # shadow-linear may run the linear ReplaySSM ring commit (it verifies a chain)
    handle(args(speculative_ddtree_mode="shadow-linear", enable_linear_replayssm_spec=True))
    ok = args()
    assert v2.spec.linear_attn_topk(ok, 1) == 2 and v2.spec.linear_attn_topk(ok, None) == 2
    assert v2.spec.linear_attn_topk(args(speculative_ddtree_mode="shadow-linear"), 1) == 1
    assert v2.spec.linear_attn_topk(args(speculative_algorithm="DFLASH"), 1) == 1
    assert v2.spec.verify_width(ok) == 16


def test_the_worker_refuses_what_a_tree_cannot_do(v2):
    """The budget and page-size rules in __init__, before the draft model loads; the target backend's
    rules in init_attention_backends, once sglang has built the backend (before the CUDA graphs)."""
    world = World(1, bs=1, budget=15, topk=4, block=16)
    v2.holder.world = world
    cls = v2.worker.DDTreeWorkerV2
    world.target.model_runner.attn_backend = types.SimpleNamespace()
    with pytest.raises(
        ValueError,
        match="takes a tree mask in verify .*; got SimpleNamespace. Pass --attention-backend triton",
    ):
        make_worker(cls, world)
    # a dense model on a backend with a linear-attention state commit: the states would not be committed
    world.target.model_runner.attn_backend = HybridBackend()
    with pytest.raises(
        ValueError, match="is not a hybrid .* HybridBackend has a linear-attention state commit"
    ):
        make_worker(cls, world)

    world = World(1, bs=1, budget=15, topk=4, block=16, hybrid=True)
    v2.holder.world = world
    world.target.model_runner.attn_backend = TritonAttnBackend()
    with pytest.raises(
        ValueError, match="is a hybrid .* TritonAttnBackend has no linear-attention state commit"
    ):
        make_worker(cls, world)
    hybrid = HybridBackend()
    hybrid.linear_attn_backend = types.SimpleNamespace(topk=1)
    world.target.model_runner.attn_backend = hybrid
    with pytest.raises(ValueError, match="0103-ddtree-hybrid.patch"):
        make_worker(cls, world)
    hybrid.linear_attn_backend = types.SimpleNamespace(topk=2)
    with pytest.raises(
        ValueError, match="SimpleNamespace does not .* Use --speculative-ddtree-mode shadow-linear"
    ):
        make_worker(cls, world)
    world.server_args.speculative_ddtree_mode = "shadow-linear"  # verifies a chain: any linear kernels
    assert make_worker(cls, world).hybrid_target
    world.server_args.speculative_ddtree_budget = 16
    with pytest.raises(ValueError, match="budget \\+ 1 must not exceed it"):
        make_worker(cls, world)


@pytest.mark.parametrize("hybrid", [False, True], ids=["dense", "hybrid"])
def test_the_worker_is_built_before_the_targets_attention_backend(v2, hybrid):
    """sglang 0.5.17 and 0.5.23 build the spec worker before the target's attention backend
    (Scheduler.init_model_worker: workers, memory pools, then init_all_attention_backends). On an H200,
    DDTREE b15/k8 on a hybrid target stopped at start-up in DDTreeWorkerV2.__init__ with
    "AttributeError: 'ModelRunner' object has no attribute 'attn_backend'"."""
    world = World(2, bs=1, budget=15, topk=8, block=16, hybrid=hybrid)
    v2.holder.world = world
    runner = world.target.model_runner
    backend = runner.attn_backend
    del runner.attn_backend  # as sglang's ModelRunner before init_attention_backends
    worker = construct(v2.worker.DDTreeWorkerV2, world)
    # hybrid or not is the model's; the tree builder makes the linear kernels' links for hybrid targets
    assert worker.hybrid_target is hybrid
    assert (worker._tree_builder.links is not None) is hybrid
    runner.attn_backend = backend
    worker.init_attention_backends()
    assert worker._need_mamba_verify_commit is hybrid
    # the backend's refusal, now from init_attention_backends
    runner.attn_backend = types.SimpleNamespace()
    with pytest.raises(ValueError, match="Pass --attention-backend triton"):
        worker.init_attention_backends()


def _methods(path, cls):
    tree = ast.parse(Path(path).read_text())
    found = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == cls]
    assert len(found) == 1, (path, cls)
    return {f.name: f for f in found[0].body if isinstance(f, ast.FunctionDef)}


def test_no_attention_backend_is_read_while_the_worker_is_built(v2):
    """Statically, on the tree's files: DDTreeWorkerV2.__init__, DFlashWorkerV2.__init__ (as the series
    leaves it) and every method of theirs those call read no ``attn_backend``."""
    here = Path(v2.worker.__file__).parent
    ddtree = _methods(here / "ddtree_worker_v2.py", "DDTreeWorkerV2")
    dflash = _methods(here / "dflash_worker_v2.py", "DFlashWorkerV2")
    todo = [("DDTreeWorkerV2", ddtree["__init__"])]
    seen = set()
    while todo:
        owner, fn = todo.pop()
        if (owner, fn.name) in seen:
            continue
        seen.add((owner, fn.name))
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute):
                assert node.attr != "attn_backend", f"{owner}.{fn.name} line {node.lineno} reads attn_backend"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
                if isinstance(target, ast.Call) and getattr(target.func, "id", None) == "super":
                    todo.append(("DFlashWorkerV2", dflash[node.func.attr]))
                elif isinstance(target, ast.Name) and target.id == "self":
                    name = node.func.attr
                    if owner == "DDTreeWorkerV2" and name in ddtree:
                        todo.append(("DDTreeWorkerV2", ddtree[name]))
                    elif name in dflash:
                        todo.append(("DFlashWorkerV2", dflash[name]))
    assert ("DFlashWorkerV2", "__init__") in seen and len(seen) > 2
    # the checks moved, not lost: init_attention_backends reads the target's backend after super()'s
    body = ddtree["init_attention_backends"].body
    first = body[0].value if isinstance(body[0], ast.Expr) else None
    assert isinstance(first, ast.Call) and first.func.attr == "init_attention_backends"


def test_the_captured_target_verify_carries_the_tree_mask(v2):
    spec = v2.spec.DDTreeSpec("DDTREE", factory=lambda a: None, supports_overlap=True)
    base = types.SimpleNamespace(draft_token_num=16, capture_hidden_mode=2)
    buffers = types.SimpleNamespace(custom_mask=torch.ones(8, dtype=torch.bool))
    target = spec.adapt_capture_verify_input(base, types.SimpleNamespace(is_draft_worker=False), buffers)
    assert isinstance(target, v2.worker.DDTreeVerifyInput)
    assert target.custom_mask is buffers.custom_mask and target.draft_token_num == 16
    assert target.retrieve_next_token is None and target.is_verify_input()
    draft = spec.adapt_capture_verify_input(base, types.SimpleNamespace(is_draft_worker=True), buffers)
    assert draft is base


def test_the_pure_parts_under_test_are_the_series_files(v2):
    # the modules imported above are the tree's files (not a copy elsewhere)
    assert Path(v2.worker.__file__).name == "ddtree_worker_v2.py"
    assert "sglang/srt/speculative" in Path(v2.commit.__file__).as_posix()


def test_logprobs_are_read_along_the_accepted_path(v2):
    if not hasattr(v2.worker, "compute_spec_logprobs"):
        pytest.skip(f"sglang {v2.version}'s DFLASH/DDTREE refuse return_logprob")
    world = World(9, bs=3, budget=15, topk=4, block=16)
    world.return_logprob = True
    width = world.budget + 1
    for _, res, _ in steps(v2, world, 5):
        logits, predict, stride = world.logprob_calls[-1]
        assert stride == width and torch.equal(predict, res.next_token_ids)
        # row j of each request is the target's distribution that emitted token j
        for b, n in enumerate(res.accept_lens.tolist()):
            rows = logits.view(-1, width, VOCAB)[b, :n].argmax(dim=-1).tolist()
            assert rows == res.next_token_ids.view(-1, width)[b, :n].tolist()
