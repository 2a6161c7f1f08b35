"""Test-only plain-torch Gated DeltaNet ops for the float32 re-scoring server (gpu-harness/ddtree_lossless.py).

sglang 0.5.11's GDN prefill kernel (and 0.5.17's, moved to sglang/kernels/ops/) refuses float32 (`chunk_gated_delta_rule`: "does not support
float32", H200 run of 2026-12-01). sitecustomize.py in this folder wraps sglang's GDN entry points so
that float32 inputs run the functions below and anything else the original Triton kernels, unchanged.

The recurrence (per value head; the state S is [V, K], sglang's pool layout [slot, HV, V, K]):
    S_t = exp(g_t) S_{t-1};  u_t = beta_t (v_t - S_t k_t);  S_t += u_t k_t^T;  o_t = scale S_t q_t
q and k optionally l2-normalised first (x / sqrt(sum x^2 + 1e-6)); with fewer q/k heads (H) than value
heads (HV), value head j reads q/k head j // (HV // H); scale defaults to K ** -0.5.

Chunked form (prefill), derived for a chunk starting from state S0 with G_t = g_1 + ... + g_t:
    S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t - G_s} u_s k_s^T
    u_t + beta_t sum_{s<t} e^{G_t - G_s} (k_t . k_s) u_s = beta_t (v_t - e^{G_t} S0 k_t)   (unit lower-triangular)
    o_t = scale (e^{G_t} S0 q_t + sum_{s<=t} e^{G_t - G_s} (q_t . k_s) u_s)
Only torch is imported; nothing here knows sglang (float32_dispatch receives the original function).
"""

import inspect
import itertools
import sys

import torch
import torch.nn.functional as F

CHUNK = 64  # sglang's FLA chunk size: `h` holds each sequence's state at the start of every 64-token chunk
L2_EPS = 1e-6


def l2norm(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def expand_heads(x, hv):
    """[..., H, D] -> [..., HV, D]: value head j reads q/k head j // (HV // H)."""
    h = x.shape[-2]
    if h == hv:
        return x
    if hv % h:
        raise ValueError(f"value heads {hv} not a multiple of q/k heads {h}")
    return x.repeat_interleave(hv // h, dim=-2)


def work_dtype(t):
    """float32 math for float32 (and lower) inputs; float64 stays float64 (the CPU tests' precision)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def gating(A_log, a, dt_bias, softplus_beta=1.0, softplus_threshold=20.0):
    """g = -exp(A_log) * softplus(a + dt_bias) (log-space decay)."""
    f = work_dtype(a)
    x = a.to(f) + dt_bias.to(f)
    return -torch.exp(A_log.to(f)) * F.softplus(x, beta=softplus_beta, threshold=softplus_threshold)


def step(S, q, k, v, g, beta, scale):
    """One token for a batch of states. S [N, HV, V, K]; q, k [N, HV, K]; v [N, HV, V]; g, beta [N, HV]."""
    S = S * torch.exp(g)[..., None, None]
    u = beta[..., None] * (v - (S @ k[..., None])[..., 0])
    S = S + u[..., None] * k[..., None, :]
    return scale * (S @ q[..., None])[..., 0], S


def chunked_sequence(q, k, v, g, beta, s0, scale, chunk=CHUNK):
    """One sequence, chunk by chunk. q, k [T, HV, K] (normalised, expanded); v [T, HV, V]; g, beta [T, HV];
    s0 [HV, V, K]. Returns o [T, HV, V], the states at chunk starts [NT, HV, V, K], the final state."""
    S, outs, starts = s0, [], []
    for c0 in range(0, q.shape[0], chunk):
        starts.append(S)
        qc, kc, vc = (x[c0 : c0 + chunk].transpose(0, 1) for x in (q, k, v))  # [HV, C, D]
        G = g[c0 : c0 + chunk].transpose(0, 1).cumsum(-1)  # [HV, C]
        bc = beta[c0 : c0 + chunk].transpose(0, 1)
        n = qc.shape[1]
        lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        # e^{G_t - G_s} for s <= t, 0 above the diagonal (masked before exp: G_t - G_s > 0 there)
        decay = torch.exp((G[:, :, None] - G[:, None, :]).masked_fill(~lower, float("-inf")))
        A = (bc[:, :, None] * decay * (kc @ kc.transpose(1, 2))).tril(-1)
        eG = torch.exp(G)[..., None]
        rhs = bc[..., None] * (vc - eG * (kc @ S.transpose(1, 2)))
        eye = torch.eye(n, dtype=A.dtype, device=A.device)
        U = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)  # [HV, C, V]
        o = scale * (eG * (qc @ S.transpose(1, 2)) + (decay * (qc @ kc.transpose(1, 2))) @ U)
        outs.append(o.transpose(0, 1))
        last = G[:, -1]
        S = torch.exp(last)[:, None, None] * S + (U * torch.exp(last[:, None] - G)[..., None]).transpose(1, 2) @ kc
    if not outs:
        return v.new_zeros(v.shape), s0.new_zeros((0, *s0.shape)), S
    return torch.cat(outs), torch.stack(starts), S


def _bounds(cu_seqlens, batch, length):
    if cu_seqlens is None:
        return [(i * length, (i + 1) * length) for i in range(batch)]
    c = [int(x) for x in cu_seqlens.tolist()]
    return list(itertools.pairwise(c))


def chunk_rule(q, k, v, g, beta, scale=None, initial_state=None, initial_state_indices=None, cu_seqlens=None,
               head_first=False, use_qk_l2norm_in_kernel=False):  # fmt: skip
    """sglang's fla.chunk.chunk_gated_delta_rule: q, k [B, T, H, K], v [B, T, HV, V], g, beta [B, T, HV]
    (B == 1 with cu_seqlens). initial_state is the state pool [slots, HV, V, K], read at
    initial_state_indices (one per sequence) and overwritten there with the final state (in place).
    Returns (o [B, T, HV, V] in q's dtype, None, h [B, NT, HV, V, K]: the state at each chunk start)."""
    if head_first:
        raise NotImplementedError("head_first is deprecated upstream and not used by sglang's GDN backend")
    B, T, _, K = q.shape
    HV, V = v.shape[-2:]
    scale = K**-0.5 if scale is None else scale
    f = work_dtype(q)
    qf, kf = q.to(f), k.to(f)
    if use_qk_l2norm_in_kernel:
        qf, kf = l2norm(qf), l2norm(kf)
    qf, kf = (expand_heads(x.reshape(B * T, -1, K), HV) for x in (qf, kf))
    vf, gf, bf = v.to(f).reshape(B * T, HV, V), g.to(f).reshape(B * T, HV), beta.to(f).reshape(B * T, HV)
    bounds = _bounds(cu_seqlens, B, T)
    if initial_state_indices is not None:
        idx = [int(x) for x in initial_state_indices.tolist()]
    else:
        idx = list(range(len(bounds)))
    o = torch.zeros(B * T, HV, V, dtype=f, device=q.device)
    hs = []
    for n, (s, e) in enumerate(bounds):
        s0 = initial_state[idx[n]].to(f) if initial_state is not None else q.new_zeros((HV, V, K), dtype=f)
        o[s:e], starts, final = chunked_sequence(qf[s:e], kf[s:e], vf[s:e], gf[s:e], bf[s:e], s0, scale)
        hs.append(starts)
        if initial_state is not None:
            initial_state[idx[n]] = final.to(initial_state.dtype)
    if cu_seqlens is None:
        h = torch.stack(hs) if hs else q.new_zeros((0, 0, HV, V, K))
    else:
        h = torch.cat(hs).unsqueeze(0)
    return o.reshape(B, T, HV, V).to(q.dtype), None, h.to(k.dtype)


def packed_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                  use_qk_l2norm_in_kernel=False):  # fmt: skip
    """sglang's fla.fused_recurrent.fused_recurrent_gated_delta_rule_packed_decode: one token per
    request; mixed_qkv [B, q | k | v] (q, k: H heads of K, v: HV heads of V), a, b [B, HV]; the state
    pool initial_state [slots, HV, V, K] updated in place at ssm_state_indices; a negative index (padding)
    gets a zero output and no state update. Writes out [B, 1, HV, V]; returns (out, initial_state)."""
    B = mixed_qkv.shape[0]
    HV, V, K = initial_state.shape[-3:]
    qd = (mixed_qkv.shape[1] - HV * V) // 2
    f = work_dtype(mixed_qkv)
    x = mixed_qkv.to(f)
    q, k, v = x[:, :qd].reshape(B, -1, K), x[:, qd : 2 * qd].reshape(B, -1, K), x[:, 2 * qd :].reshape(B, HV, V)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    q, k = expand_heads(q, HV), expand_heads(k, HV)
    g = gating(A_log, a, dt_bias)
    beta = torch.sigmoid(b.to(f)).to(b.dtype).to(f)  # the kernel rounds beta to b's dtype
    idx = ssm_state_indices.long()
    valid = idx >= 0
    S = initial_state[idx.clamp(min=0)].to(f)
    o, S = step(S, q, k, v, g, beta, scale)
    o = o * valid[:, None, None]
    out.copy_(o.unsqueeze(1).to(out.dtype))
    initial_state[idx[valid]] = S[valid].to(initial_state.dtype)
    return out, initial_state


def sigmoid_gating_update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
                          initial_state_indices, scale=None, use_qk_l2norm_in_kernel=False, cu_seqlens=None):  # fmt: skip
    """sglang's fla.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update, decode form
    (no intermediate-state cache, no tree, state written back): q, k [B, T, H, K], v [B, T, HV, V],
    a, b [.., HV] one row per token; per sequence the state is read from initial_state_source at its
    index (zero when the index is negative) and written back there at the end. Returns o like v."""
    B, T, _, K = q.shape
    HV, V = v.shape[-2:]
    scale = K**-0.5 if scale is None else scale
    f = work_dtype(q)
    qf, kf = q.to(f).reshape(B * T, -1, K), k.to(f).reshape(B * T, -1, K)
    if use_qk_l2norm_in_kernel:
        qf, kf = l2norm(qf), l2norm(kf)
    qf, kf = expand_heads(qf, HV), expand_heads(kf, HV)
    vf = v.to(f).reshape(B * T, HV, V)
    g = gating(A_log, a.reshape(-1, HV), dt_bias, softplus_beta, softplus_threshold)
    beta = torch.sigmoid(b.to(f).reshape(-1, HV))
    o = torch.empty(B * T, HV, V, dtype=f, device=q.device)
    for n, (s, e) in enumerate(_bounds(cu_seqlens, B, T)):
        i = int(initial_state_indices[n]) if initial_state_source is not None else -1
        S = initial_state_source[i].to(f)[None] if i >= 0 else vf.new_zeros((1, HV, V, K))
        for t in range(s, e):
            ot, S = step(S, qf[t : t + 1], kf[t : t + 1], vf[t : t + 1], g[t : t + 1], beta[t : t + 1], scale)
            o[t] = ot[0]
        if i >= 0:
            initial_state_source[i] = S[0].to(initial_state_source.dtype)
    return o.reshape(v.shape).to(q.dtype)


def float32_dispatch(original, replacement, tensor_arg, unsupported=None):
    """A drop-in for `original`: float32 `tensor_arg` (and every argument named in `unsupported` at its
    given default) -> `replacement`, called with the original's arguments by name; anything else ->
    `original`, unchanged."""
    sig = inspect.signature(original)
    # only the arguments this version's function has (0.5.17 added lower_bound, cache_ring and ReplaySSM's)
    unsupported = {n: v for n, v in (unsupported or {}).items() if n in sig.parameters}
    said = []

    def plain(name, value):
        want = unsupported[name]
        return value is None if want is None else (not isinstance(value, torch.Tensor) and value == want)

    def wrapper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        t = a.get(tensor_arg)
        if not (isinstance(t, torch.Tensor) and t.dtype == torch.float32 and all(plain(n, a[n]) for n in unsupported)):
            return original(*args, **kwargs)
        if not said:
            said.append(1)
            print(f"fp32_shim: {original.__name__} on float32 runs plain torch (TEST ONLY)", file=sys.stderr)
        return replacement(**{n: v for n, v in a.items() if n not in unsupported})

    wrapper.__name__ = original.__name__
    wrapper.__wrapped__ = original
    return wrapper


# sglang module -> (function, its float32 tensor argument, replacement, arguments only the original handles)
VERIFY_ONLY = {"is_kda": False, "disable_state_update": False, "intermediate_states_buffer": None,
               "intermediate_state_indices": None, "cache_steps": None, "retrieve_parent_token": None,
               # sglang 0.5.17's: KDA's lower bound, the ReplaySSM ring and its raw inputs
               "lower_bound": None, "cache_ring": False, "replayssm_rawv": None, "replayssm_rawk": None,
               "replayssm_g": None, "replayssm_beta": None}  # fmt: skip
# the same functions under each version's module (0.5.11: sglang/srt/layers/attention/fla/; from 0.5.17
# sglang/kernels/ops/attention/fla/, with the same names and the arguments above added)
FLA_PACKAGES = ("sglang.srt.layers.attention.fla", "sglang.kernels.ops.attention.fla")
PATCHES = {}
for _pkg in FLA_PACKAGES:
    PATCHES.update({
        f"{_pkg}.chunk": [("chunk_gated_delta_rule", "q", chunk_rule, None)],
        f"{_pkg}.fused_recurrent": [
            ("fused_recurrent_gated_delta_rule_packed_decode", "mixed_qkv", packed_decode, None)],
        f"{_pkg}.fused_sigmoid_gating_recurrent": [
            ("fused_sigmoid_gating_delta_rule_update", "q", sigmoid_gating_update, VERIFY_ONLY)],
    })  # fmt: skip


def patch(module):
    """Replace the module's GDN functions by float32_dispatch wrappers (before anyone imports them)."""
    for name, arg, replacement, unsupported in PATCHES[module.__name__]:
        setattr(module, name, float32_dispatch(getattr(module, name), replacement, arg, unsupported))
