"""gpu-harness/fp32_shim: the float32 judge's plain-torch Gated DeltaNet ops, on CPU.

sglang's own GDN kernels are Triton (CUDA only), so they cannot run here: the oracle is an independent
naive recurrence, token by token and head by head in float64, with the state in the textbook [K, V]
layout (transposed into sglang's pool layout [slot, HV, V, K] only to compare). The argument
conventions checked (read from sglang 0.5.11's fla/chunk.py, chunk_delta_h.py, fused_recurrent.py,
fused_sigmoid_gating_recurrent.py and linear/kernels/gdn_triton.py): q/k heads shared by HV // H value
heads, l2norm eps 1e-6, default scale K ** -0.5, cu_seqlens varlen batches, the initial state read from
the pool at one index per sequence and the final state written back there in place, `h` = each
sequence's state at the start of every 64-token chunk, a negative decode index = padding (zero output,
no state write), the gate g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import textwrap
import types

import pytest

torch = pytest.importorskip("torch", reason="torch (CPU) is needed for the shim's GDN math")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "gpu-harness", "fp32_shim")
sys.path.insert(0, SHIM)
import fp32_attention
import fp32_gdn

H, HV, K, V = 2, 4, 8, 6  # two value heads per q/k head, as Qwen3.5's GDN layers have
SLOTS = 7


def close(a, b, tol=1e-9):
    return torch.allclose(a, b, rtol=0, atol=tol)


def rand(*shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def oracle(q, k, v, g, beta, s0, scale, l2):
    """Naive: q, k [T, H, K], v [T, HV, V], g, beta [T, HV], s0 [HV, V, K] (pool layout).
    Returns o [T, HV, V], the final state [HV, V, K] and the states before tokens 0, 64, 128, ..."""
    T, hq, _ = q.shape
    hv = v.shape[1]
    state = [s0[j].T.clone() for j in range(hv)]  # [K, V] per value head
    o = torch.zeros(T, hv, v.shape[2], dtype=torch.float64)
    starts = []
    for t in range(T):
        if t % 64 == 0:
            starts.append(torch.stack([s.T for s in state]))
        for j in range(hv):
            i = j // (hv // hq)
            qt, kt = q[t, i], k[t, i]
            if l2:
                qt = qt / math.sqrt(float(qt @ qt) + 1e-6)
                kt = kt / math.sqrt(float(kt @ kt) + 1e-6)
            s = state[j] * math.exp(float(g[t, j]))
            delta = float(beta[t, j]) * (v[t, j] - kt @ s)
            s = s + torch.outer(kt, delta)
            o[t, j] = (qt * scale) @ s
            state[j] = s
    return o, torch.stack([s.T for s in state]), starts


def inputs(T, seed):
    q, k = rand(T, H, K, seed=seed), rand(T, H, K, seed=seed + 1)
    v = rand(T, HV, V, seed=seed + 2)
    g = -torch.nn.functional.softplus(rand(T, HV, seed=seed + 3)) * 0.3  # log decay <= 0
    beta = torch.sigmoid(rand(T, HV, seed=seed + 4))
    return q, k, v, g, beta


@pytest.mark.parametrize("l2", [True, False])
def test_chunk_rule_varlen_pool_in_place(l2):
    """Three sequences of 5, 65 and 130 tokens (crossing 64-token chunks) in one varlen batch, each from
    its own pool slot: outputs, final states written back at the slots, other slots untouched, h."""
    lens, slots = [5, 65, 130], [3, 0, 5]
    T = sum(lens)
    q, k, v, g, beta = inputs(T, seed=10)
    if not l2:  # keep the unnormalised recurrence bounded
        q, k = q / math.sqrt(K), k / math.sqrt(K)
    pool = rand(SLOTS, HV, V, K, seed=20, scale=0.5)
    before = pool.clone()
    cu = torch.tensor([0, 5, 70, 200])
    o, none, h = fp32_gdn.chunk_rule(q[None], k[None], v[None], g[None], beta[None], initial_state=pool,
                                     initial_state_indices=torch.tensor(slots), cu_seqlens=cu,
                                     use_qk_l2norm_in_kernel=l2)  # fmt: skip
    assert none is None and o.shape == (1, T, HV, V)
    assert h.shape == (1, 1 + 2 + 3, HV, V, K)  # chunks per sequence: 1, 2, 3
    hrow = 0
    for n, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
        want_o, want_s, starts = oracle(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], before[slots[n]], K**-0.5, l2)
        assert close(o[0, s:e], want_o), f"sequence {n}"
        assert close(pool[slots[n]], want_s), f"sequence {n} final state"
        for st in starts:
            assert close(h[0, hrow], st)
            hrow += 1
    for untouched in set(range(SLOTS)) - set(slots):
        assert torch.equal(pool[untouched], before[untouched])


def test_chunk_rule_batched_without_cu_seqlens_and_explicit_scale():
    """[B, T] inputs without cu_seqlens: sequence b is slot b (indices default) and h is [B, NT, ...]."""
    B, T = 2, 70
    q, k, v, g, beta = (x.reshape(B, T, *x.shape[1:]) for x in inputs(B * T, seed=30))
    pool = rand(B, HV, V, K, seed=31, scale=0.5)
    before = pool.clone()
    o, _, h = fp32_gdn.chunk_rule(q, k, v, g, beta, scale=0.3, initial_state=pool, use_qk_l2norm_in_kernel=True)
    assert h.shape == (B, 2, HV, V, K)
    for b in range(B):
        want_o, want_s, starts = oracle(q[b], k[b], v[b], g[b], beta[b], before[b], 0.3, True)
        assert close(o[b], want_o)
        assert close(pool[b], want_s)
        assert close(h[b, 1], starts[1])


def test_chunk_rule_float32_keeps_dtypes_and_matches():
    """What the server passes: float32 q/k/v/g/beta, a float32 pool; o and h come back float32."""
    T = 100
    q, k, v, g, beta = inputs(T, seed=40)
    pool = rand(3, HV, V, K, seed=41, scale=0.5)
    want_o, want_s, _ = oracle(q, k, v, g, beta, pool[1], K**-0.5, True)
    pool32 = pool.float()
    o, _, h = fp32_gdn.chunk_rule(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=pool32,
                                  initial_state_indices=torch.tensor([1]), cu_seqlens=torch.tensor([0, T]),
                                  use_qk_l2norm_in_kernel=True)  # fmt: skip
    assert o.dtype == h.dtype == pool32.dtype == torch.float32
    assert close(o[0].double(), want_o, 1e-4)
    assert close(pool32[1].double(), want_s, 1e-4)


@pytest.mark.parametrize("chunk", [1, 7, 64, 200])
def test_chunked_equals_token_by_token(chunk):
    """The chunked (triangular-solve) form equals the per-token step whatever the chunk size."""
    T = 150
    q, k, v, g, beta = inputs(T, seed=50)
    q, k = fp32_gdn.expand_heads(fp32_gdn.l2norm(q), HV), fp32_gdn.expand_heads(fp32_gdn.l2norm(k), HV)
    s0 = rand(HV, V, K, seed=51, scale=0.5)
    o, starts, final = fp32_gdn.chunked_sequence(q, k, v, g, beta, s0, 0.35, chunk=chunk)
    S = s0[None]
    for t in range(T):
        if t % chunk == 0:
            assert close(starts[t // chunk], S[0])
        ot, S = fp32_gdn.step(S, q[t : t + 1], k[t : t + 1], v[t : t + 1], g[t : t + 1], beta[t : t + 1], 0.35)
        assert close(o[t], ot[0])
    assert close(final, S[0])


def gate_inputs(n, seed):
    A_log, dt_bias = rand(HV, seed=seed, scale=0.5), rand(HV, seed=seed + 1, scale=0.5)
    a, b = rand(n, HV, seed=seed + 2), rand(n, HV, seed=seed + 3)
    g = -torch.exp(A_log) * torch.log1p(torch.exp(a + dt_bias))
    return A_log, dt_bias, a, b, g, torch.sigmoid(b)


def test_packed_decode_pool_padding_and_gates():
    """Three requests, one padded (index -1): zero output, no slot written; the others' slots advance."""
    B = 3
    q, k, v, _, _ = inputs(B, seed=60)
    A_log, dt_bias, a, b, g, beta = gate_inputs(B, seed=61)
    mixed = torch.cat([q.reshape(B, -1), k.reshape(B, -1), v.reshape(B, -1)], 1)
    pool = rand(SLOTS, HV, V, K, seed=62, scale=0.5)
    before = pool.clone()
    idx = torch.tensor([4, -1, 2])
    out = torch.empty(B, 1, HV, V, dtype=torch.float64)
    fp32_gdn.packed_decode(mixed, a, b, A_log, dt_bias, 0.3, pool, out, idx, use_qk_l2norm_in_kernel=True)
    for n, slot in enumerate(idx.tolist()):
        if slot < 0:
            assert torch.equal(out[n], torch.zeros_like(out[n]))
            continue
        sl = slice(n, n + 1)
        want_o, want_s, _ = oracle(q[sl], k[sl], v[sl], g[sl], beta[sl], before[slot], 0.3, True)
        assert close(out[n, 0], want_o[0])
        assert close(pool[slot], want_s)
    for untouched in set(range(SLOTS)) - {4, 2}:
        assert torch.equal(pool[untouched], before[untouched])


def test_sigmoid_gating_update_varlen():
    """Two sequences (1 and 3 tokens); the second has index -1: zero initial state, nothing written."""
    T = 4
    q, k, v, _, _ = inputs(T, seed=70)
    A_log, dt_bias, a, b, g, beta = gate_inputs(T, seed=71)
    pool = rand(SLOTS, HV, V, K, seed=72, scale=0.5)
    before = pool.clone()
    o = fp32_gdn.sigmoid_gating_update(A_log, a, dt_bias, 1.0, 20.0, q[None], k[None], v[None], b, pool,
                                       torch.tensor([6, -1]), use_qk_l2norm_in_kernel=True,
                                       cu_seqlens=torch.tensor([0, 1, 4]))  # fmt: skip
    want0, s0, _ = oracle(q[:1], k[:1], v[:1], g[:1], beta[:1], before[6], K**-0.5, True)
    want1, _, _ = oracle(q[1:], k[1:], v[1:], g[1:], beta[1:], torch.zeros(HV, V, K, dtype=torch.float64),
                         K**-0.5, True)  # fmt: skip
    assert o.shape == (1, T, HV, V)
    assert close(o[0, :1], want0) and close(o[0, 1:], want1)
    assert close(pool[6], s0)
    assert all(torch.equal(pool[i], before[i]) for i in range(SLOTS) if i != 6)


def test_prefill_then_decode_equals_one_recurrence():
    """What the float32 server does: a 70-token prefill into slot 1, then 5 decode steps from the pool."""
    T, D = 70, 5
    q, k, v, _, _ = inputs(T + D, seed=80)
    A_log, dt_bias, a, b, g, beta = gate_inputs(T + D, seed=81)
    pool = torch.zeros(3, HV, V, K, dtype=torch.float64)
    o, _, _ = fp32_gdn.chunk_rule(q[None, :T], k[None, :T], v[None, :T], g[None, :T], beta[None, :T],
                                  initial_state=pool, initial_state_indices=torch.tensor([1]),
                                  cu_seqlens=torch.tensor([0, T]), use_qk_l2norm_in_kernel=True)  # fmt: skip
    outs = [o[0]]
    for t in range(T, T + D):
        mixed = torch.cat([q[t].reshape(1, -1), k[t].reshape(1, -1), v[t].reshape(1, -1)], 1)
        out = torch.empty(1, 1, HV, V, dtype=torch.float64)
        fp32_gdn.packed_decode(mixed, a[t : t + 1], b[t : t + 1], A_log, dt_bias, K**-0.5, pool, out,
                               torch.tensor([1]), use_qk_l2norm_in_kernel=True)  # fmt: skip
        outs.append(out[:, 0])
    want_o, want_s, _ = oracle(q, k, v, g, beta, torch.zeros(HV, V, K, dtype=torch.float64), K**-0.5, True)
    assert close(torch.cat(outs), want_o)
    assert close(pool[1], want_s)


def test_float32_dispatch_routes_by_dtype_and_verify_arguments():
    calls = []

    def original(q, k, scale=None, intermediate_states_buffer=None, is_kda=False):
        calls.append(("original", q.dtype, scale))
        return "orig"

    def replacement(q, k, scale=None):
        calls.append(("torch", q.dtype, scale))
        return "torch"

    w = fp32_gdn.float32_dispatch(original, replacement, "q", {"intermediate_states_buffer": None, "is_kda": False})
    bf = torch.zeros(2, dtype=torch.bfloat16)
    f32 = torch.zeros(2)
    assert w(bf, bf, 0.5) == "orig"  # bf16: the original kernel, unchanged
    assert w(f32, f32, scale=0.25) == "torch"
    assert w(q=f32, k=f32) == "torch"
    assert w(f32, f32, intermediate_states_buffer=f32) == "orig"  # verify-only arguments: the original
    assert w(f32, f32, is_kda=True) == "orig"
    assert w(torch.zeros(2, dtype=torch.float64), f32) == "orig"
    assert calls[:3] == [("original", torch.bfloat16, 0.5), ("torch", torch.float32, 0.25), ("torch", torch.float32, None)]
    assert w.__name__ == "original"


def test_patch_replaces_every_listed_function():
    for name, entries in fp32_gdn.PATCHES.items():
        mod = types.ModuleType(name)
        for fn, *_ in entries:
            setattr(mod, fn, lambda *a, **kw: "orig")
        fp32_gdn.patch(mod)
        for fn, *_ in entries:
            assert getattr(mod, fn).__wrapped__ is not None


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    """A fake sglang tree on sys.path (the GDN chunk module, a consumer importing from it by name as
    gdn_triton.py does, MultiPlatformOp); sitecustomize loaded in process; everything undone after."""
    root = tmp_path / "sglang"
    fla = root / "srt" / "layers" / "attention" / "fla"
    utils = root / "srt" / "layers" / "utils"
    models = root / "srt" / "models"
    for d in (fla, utils, models):
        d.mkdir(parents=True)
    for d in (root, root / "srt", root / "srt" / "layers", root / "srt" / "layers" / "attention", fla, utils, models):
        (d / "__init__.py").touch()
    (models / "dflash.py").write_text(textwrap.dedent("""
        import torch

        class DFlashDraftModel(torch.nn.Module):
            def __init__(self, dtype):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4, bias=False, dtype=dtype)

            def forward(self, input_ids, positions, forward_batch, input_embeds=None, get_embedding=False):
                return self.fc(input_embeds)

        EntryClass = DFlashDraftModel
    """))
    (fla / "chunk.py").write_text(textwrap.dedent("""
        def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, initial_state_indices=None,
                                   cu_seqlens=None, head_first=False, use_qk_l2norm_in_kernel=False):
            return "triton"
    """))
    (fla / "consumer.py").write_text("from sglang.srt.layers.attention.fla.chunk import chunk_gated_delta_rule\n")
    (utils / "multi_platform.py").write_text(textwrap.dedent("""
        class MultiPlatformOp:
            def dispatch_forward(self):
                return lambda x: "cuda"
            def forward_native(self, x):
                return "native"
    """))
    saved = {n: m for n, m in sys.modules.items() if n == "sglang" or n.startswith("sglang.")}
    for n in saved:
        del sys.modules[n]
    monkeypatch.syspath_prepend(str(tmp_path))
    before = list(sys.meta_path)
    spec = importlib.util.spec_from_file_location("fp32_shim_sitecustomize", os.path.join(SHIM, "sitecustomize.py"))
    site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site)
    yield site
    sys.meta_path[:] = before
    for n in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[n]
    sys.modules.update(saved)


def test_sitecustomize_patches_modules_before_consumers_import(fake_sglang, capfd):
    """The consumer's name is the wrapper: bfloat16 reaches the (fake) kernel, float32 the torch path,
    which writes the pool slot; MultiPlatformOp's float32 calls go to forward_native."""
    from sglang.srt.layers.attention.fla import consumer
    from sglang.srt.layers.utils.multi_platform import MultiPlatformOp

    T, hv = 3, 2
    args = [torch.randn(1, T, 1, 4), torch.randn(1, T, 1, 4), torch.randn(1, T, hv, 4), -torch.rand(1, T, hv),
            torch.rand(1, T, hv)]  # fmt: skip
    assert consumer.chunk_gated_delta_rule(*(a.bfloat16() for a in args)) == "triton"
    pool = torch.zeros(2, hv, 4, 4)
    o, _, h = consumer.chunk_gated_delta_rule(*args, initial_state=pool, initial_state_indices=torch.tensor([1]),
                                              cu_seqlens=torch.tensor([0, T]), use_qk_l2norm_in_kernel=True)  # fmt: skip
    assert o.shape == (1, T, hv, 4) and h.shape == (1, 1, hv, 4, 4)
    assert pool[1].abs().sum() > 0 and pool[0].abs().sum() == 0
    fwd = MultiPlatformOp().dispatch_forward()
    assert fwd(torch.zeros(1, dtype=torch.bfloat16)) == "cuda" and fwd(torch.zeros(1)) == "native"
    err = capfd.readouterr().err
    assert "fla.chunk: float32 Gated DeltaNet runs plain torch (TEST ONLY)" in err
    assert "chunk_gated_delta_rule on float32 runs plain torch" in err


def test_extend_attention_tiles_halved_only_for_float32():
    """fp32_attention: while an extend call has a float32 query, sglang's block sizes are halved."""
    mod = types.ModuleType("sglang.srt.layers.attention.triton_ops.extend_attention")
    mod._get_block_sizes_for_extend_attention = lambda lq, lv: (256, 0, 256, 128, 64, 8)
    mod.extend_attention_fwd = lambda q_extend, *rest: mod._get_block_sizes_for_extend_attention(256, 256)[3:5]
    mod.extend_attention_fwd_unified = lambda q, o: mod._get_block_sizes_for_extend_attention(256, 256)[3:5]
    fp32_attention.patch(mod)
    assert mod.extend_attention_fwd(torch.zeros(1, dtype=torch.bfloat16), 1) == (128, 64)
    assert mod.extend_attention_fwd(torch.zeros(1), 1) == (64, 32)
    assert mod.extend_attention_fwd_unified(q=torch.zeros(1), o=None) == (64, 32)
    assert mod.extend_attention_fwd_unified(torch.zeros(1, dtype=torch.float16), None) == (128, 64)
    assert mod._get_block_sizes_for_extend_attention(256, 256)[3:5] == (128, 64)  # outside a float32 call


def test_draft_gets_float32_embeds_only_when_its_weights_are_float32(fake_sglang, capfd):
    """sglang's eager extend path hands input_embeds over as bfloat16: a float32 draft gets them back in
    float32 (its first projection would refuse bfloat16), a bfloat16 draft exactly what it was given."""
    from sglang.srt.models.dflash import DFlashDraftModel

    embeds = torch.randn(3, 4).bfloat16()
    out = DFlashDraftModel(torch.float32).forward(None, None, None, input_embeds=embeds)
    assert out.dtype == torch.float32
    out = DFlashDraftModel(torch.float32)(None, None, None, embeds)  # positional, through nn.Module.__call__
    assert out.dtype == torch.float32
    assert DFlashDraftModel(torch.bfloat16).forward(None, None, None, input_embeds=embeds).dtype == torch.bfloat16
    with pytest.raises(RuntimeError):  # unpatched, the dtype clash the shim answers (H200 run of 2026-12-02)
        DFlashDraftModel.forward.__wrapped__(DFlashDraftModel(torch.float32), None, None, None, embeds)
    assert "DFlashDraftModel takes float32 input_embeds" in capfd.readouterr().err


@pytest.mark.parametrize(("version", "module"), [
    ("0.5.11", "sglang/srt/layers/attention/fla/fused_sigmoid_gating_recurrent.py"),
    ("0.5.17", "sglang/kernels/ops/attention/fla/fused_sigmoid_gating_recurrent.py"),
])
def test_the_verify_kernels_own_arguments_keep_the_original_in_each_version(version, module):
    """The shim wraps each version's GDN functions by their own signature (0.5.17 adds lower_bound, cache_ring and
    ReplaySSM's arguments): a float32 call with none of the verify-only arguments runs the plain-torch replacement,
    one that gives any (a tree verify's retrieve_parent_token, a ring) runs sglang's kernel."""
    import ast
    import zipfile

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from sglang_wheel import sglang_wheel

    with zipfile.ZipFile(sglang_wheel(version=version)) as z:
        tree = ast.parse(z.read(module))
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
              and n.name == "fused_sigmoid_gating_delta_rule_update")
    fn.body, fn.decorator_list, fn.returns = [ast.parse("return 'sglang'").body[0]], [], None
    for a in fn.args.args:
        a.annotation = None
    ns = {}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), module, "exec"), ns)  # noqa: S102
    original = ns[fn.name]
    calls = []
    wrapped = fp32_gdn.float32_dispatch(original, lambda **kw: calls.append(sorted(kw)) or "torch", "q",
                                        fp32_gdn.VERIFY_ONLY)
    q = torch.zeros(1, 1, 2, 8, dtype=torch.float32)
    pos = {"A_log": None, "a": None, "dt_bias": None, "softplus_beta": 1.0, "softplus_threshold": 20.0, "q": q, "k": q,
           "v": q, "b": None, "initial_state_source": None, "initial_state_indices": None}
    assert wrapped(**pos) == "torch"
    assert "retrieve_parent_token" not in calls[0] and ("cache_ring" in [a.arg for a in fn.args.args]) == (
        version == "0.5.17")
    assert wrapped(**pos, retrieve_parent_token=torch.zeros(1)) == "sglang"
    assert wrapped(**dict(pos, q=q.bfloat16())) == "sglang"
    if version == "0.5.17":
        assert wrapped(**pos, cache_ring=True) == "sglang"
    for pkg in fp32_gdn.FLA_PACKAGES:
        assert f"{pkg}.fused_sigmoid_gating_recurrent" in fp32_gdn.PATCHES
    assert module.replace("/", ".")[:-3] in fp32_gdn.PATCHES
