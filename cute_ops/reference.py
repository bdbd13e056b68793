"""Plain PyTorch versions of the ops. Tests call them on float64 copies as the reference, and with
``upcast=False`` in the working dtype for PyTorch's own low-precision error (the yardstick of the
tests' error bounds); benchmarks call them in the working dtype as the `torch_eager` and
`torch_compile` baselines."""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, upcast: bool = True) -> torch.Tensor:
    """RMSNorm as a LLaMA model writes it, with float32 (or wider) statistics; ``upcast=False``
    computes every step in x's dtype."""
    acc = torch.promote_types(x.dtype, torch.float32) if upcast else x.dtype
    xf = x.to(acc)
    inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.to(acc)).to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6, upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(out, new_residual)``; the sum is rounded to the residual's dtype first."""
    new_residual = (residual.to(torch.float32) + x.to(torch.float32)).to(residual.dtype) \
        if residual.dtype != torch.float64 else residual + x
    return rms_norm(new_residual, weight, eps, upcast), new_residual


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                     cos_sin_cache: torch.Tensor, upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Out-of-place rotate-half RoPE; returns new ``(q, k)``. ``upcast=False`` rotates in q's dtype."""
    rot_dim = cos_sin_cache.shape[1]
    half = rot_dim // 2
    acc = torch.promote_types(q.dtype, torch.float32) if upcast else q.dtype
    cs = cos_sin_cache[positions.long()].to(acc)            # [..., rot_dim]
    cos, sin = cs[..., :half].unsqueeze(-2), cs[..., half:].unsqueeze(-2)  # [..., 1, half]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.to(acc)
        x1, x2, rest = xf[..., :half], xf[..., half:rot_dim], xf[..., rot_dim:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
              causal: bool = False, upcast: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention with flash_fwd's layout and rules; returns ``(out, lse)``.

    q ``[batch, seqlen_q, heads_q, head_dim]``, k and v ``[batch, seqlen_k, heads_kv, head_dim]``;
    query head h reads kv head ``h // (heads_q // heads_kv)``. causal keeps keys
    ``j <= i + seqlen_k - seqlen_q`` (bottom-right aligned); a query left with no key gets out = 0
    and lse = -inf. Computed in q's dtype promoted to at least float32; out is returned in q's dtype
    and lse ``[batch, heads_q, seqlen_q]`` in the computation dtype.

    ``upcast=False`` is the same math in q's dtype, as PyTorch eager runs it on 16-bit tensors
    (scores rounded, softmax rounded, P @ V rounded): the low-precision yardstick of the tests.
    """
    acc = torch.promote_types(q.dtype, torch.float32) if upcast else q.dtype
    seqlen_q, heads_q, head_dim = q.shape[1], q.shape[2], q.shape[3]
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = head_dim ** -0.5 if softmax_scale is None else softmax_scale
    group = heads_q // heads_kv
    qf = q.to(acc).transpose(1, 2)                                          # [B, Hq, Sq, D]
    kf = k.to(acc).transpose(1, 2).repeat_interleave(group, dim=1)          # [B, Hq, Sk, D]
    vf = v.to(acc).transpose(1, 2).repeat_interleave(group, dim=1)
    scores = qf @ kf.transpose(-1, -2) * scale                              # [B, Hq, Sq, Sk]
    if causal:
        i = torch.arange(seqlen_q, device=q.device).unsqueeze(1)
        j = torch.arange(seqlen_k, device=q.device)
        scores = scores.masked_fill(j > i + (seqlen_k - seqlen_q), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                   # -inf where no key is seen
    if upcast:
        # Subtracting 0 instead of -inf on such rows gives exp(-inf) = 0 rather than NaN: out = 0.
        probs = torch.exp(scores - lse.masked_fill(lse == float("-inf"), 0).unsqueeze(-1))
    else:  # softmax of a fully masked row is NaN: such rows get 0, as above
        probs = torch.softmax(scores, dim=-1).masked_fill((lse == float("-inf")).unsqueeze(-1), 0)
    out = (probs @ vf).transpose(1, 2).to(q.dtype)
    return out, lse


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, softmax_scale: float | None = None,
                     causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention` of each packed sequence on its own, with flash_fwd_varlen's layout:
    q ``[total_q, heads_q, head_dim]``, k and v ``[total_k, heads_kv, head_dim]``; returns out
    ``[total_q, heads_q, head_dim]`` and lse ``[heads_q, total_q]``."""
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    for b in range(len(bounds_q) - 1):
        rows_q, rows_k = slice(bounds_q[b], bounds_q[b + 1]), slice(bounds_k[b], bounds_k[b + 1])
        out, lse = attention(q[None, rows_q], k[None, rows_k], v[None, rows_k], softmax_scale, causal)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=-1)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                     k_new: torch.Tensor | None = None, v_new: torch.Tensor | None = None,
                     block_table: torch.Tensor | None = None, rotary_cos: torch.Tensor | None = None,
                     rotary_sin: torch.Tensor | None = None, softmax_scale: float | None = None,
                     causal: bool = True, upcast: bool = True, k_scale: torch.Tensor | None = None,
                     v_scale: torch.Tensor | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """flash_decode's result, computed sequence by sequence without touching the inputs; returns
    ``(out, lse, k_cache, v_cache)`` with the caches as they should be after the call (copies).

    The new tokens (q, and k_new/v_new when given) are rotated in the inputs' dtype, as the kernel
    stores them; attention is :func:`attention` with the diagonal aligned bottom-right, so that new
    token i sees the keys up to its own position, in float64 (out and lse float64), or with
    ``upcast=False`` in the inputs' dtype (PyTorch's own low-precision error). An fp8 cache (with
    k_scale and v_scale) gets the new rows quantized as the kernel stores them (`quantize_kv`) and
    is attended dequantized (in float64, or q's dtype without upcast)."""
    from .decode import dequantize_kv, quantize_kv

    fp8 = k_scale is not None
    k_cache, v_cache = k_cache.clone(), v_cache.clone()
    # fp8 rows are moved as bytes: indexing float8 tensors is not implemented everywhere.
    kc, vc = (c.view(torch.uint8) for c in (k_cache, v_cache)) if fp8 else (k_cache, v_cache)
    batch, tokens = q.shape[:2]
    page_size = k_cache.shape[1]
    outs, lses = [], []
    for b in range(batch):
        cached = int(cache_seqlens[b])
        qb = q[b:b + 1]
        if k_new is not None:
            positions = torch.arange(cached, cached + tokens, device=q.device)
            kb_new, vb_new = k_new[b:b + 1], v_new[b:b + 1]
            if rotary_cos is not None:
                cos_sin = torch.cat([rotary_cos, rotary_sin], dim=-1)
                qb, kb_new = rotary_embedding(qb, kb_new, positions[None], cos_sin)
            rows = positions
            k_rows, v_rows = kb_new[0], vb_new[0]
            if fp8:
                k_rows, v_rows = (quantize_kv(t, s).view(torch.uint8) for t, s in ((k_rows, k_scale), (v_rows, v_scale)))
            if block_table is None:
                kc[b, rows], vc[b, rows] = k_rows, v_rows
            else:
                pages = block_table[b, rows // page_size].long()
                kc[pages, rows % page_size], vc[pages, rows % page_size] = k_rows, v_rows
        length = cached + (tokens if k_new is not None else 0)
        keys = torch.arange(length, device=q.device)
        if block_table is None:
            kb, vb = kc[b, keys], vc[b, keys]
        else:
            pages = block_table[b, keys // page_size].long()
            kb, vb = kc[pages, keys % page_size], vc[pages, keys % page_size]
        if fp8:
            kb, vb = (dequantize_kv(t.view(torch.float8_e4m3fn), s, torch.float64 if upcast else q.dtype)
                      for t, s in ((kb, k_scale), (vb, v_scale)))
        qb, kb, vb = (t.double() if upcast else t for t in (qb, kb, vb))
        out, lse = attention(qb, kb[None], vb[None], softmax_scale, causal, upcast)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses), k_cache, v_cache


def gemm_pair(a: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor, activation: str = "swiglu",
              round_h: torch.dtype | None = None) -> torch.Tensor:
    """``act(a @ b0.T) @ b1.T`` in a's dtype; for "swiglu", b0 is packed by `cute_ops.pack_gate_up`.
    `round_h` rounds the intermediate to that dtype, as the kernel stores it."""
    from .gemm_pair import unpack_gate_up

    if activation == "swiglu":
        gate, up = unpack_gate_up(b0)
        h = torch.nn.functional.silu(a @ gate.T) * (a @ up.T)
    elif activation == "gelu":
        h = torch.nn.functional.gelu(a @ b0.T)
    else:
        h = a @ b0.T
    if round_h is not None:
        h = h.to(round_h).to(a.dtype)
    return h @ b1.T


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """`cute_ops.swiglu` as a model writes it: ``F.silu(gate) * up`` over the columns of a gate/up
    product in pack_gate_up's order, each step in gate_up's dtype (float64: the exact reference)."""
    from .gemm_pair import unpack_gate_up

    rows = gate_up.reshape(-1, gate_up.shape[-1])
    gate, up = (t.T for t in unpack_gate_up(rows.T))
    return (torch.nn.functional.silu(gate) * up).reshape(*gate_up.shape[:-1], gate_up.shape[-1] // 2)


def llama_mlp(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """LLaMA's MLP as a model writes it (the cuBLAS baseline): down(silu(gate(x)) * up(x))."""
    return torch.nn.functional.linear(torch.nn.functional.silu(torch.nn.functional.linear(x, w_gate))
                                      * torch.nn.functional.linear(x, w_up), w_down)


def gemv(x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
         residual: torch.Tensor | None = None, activation: str = "none", upcast: bool = True) -> torch.Tensor:
    """`cute_ops.gemv` as a model writes it: ``rms_norm`` (when norm_weight is given), ``F.linear``,
    SwiGLU over the packed gate/up weight, ``+ residual``; each step in x's dtype (float64 inputs:
    the exact reference). ``upcast`` is the norm's."""
    from .gemm_pair import unpack_gate_up

    h = rms_norm(x, norm_weight, eps, upcast) if norm_weight is not None else x
    if activation == "swiglu":
        gate, up = unpack_gate_up(weight)
        y = torch.nn.functional.silu(torch.nn.functional.linear(h, gate)) * torch.nn.functional.linear(h, up)
    else:
        y = torch.nn.functional.linear(h, weight)
    return y if residual is None else y + residual
