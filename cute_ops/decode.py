"""Flash-Decoding: attention of a few new tokens a sequence over a KV cache, contiguous or paged,
split across CTAs along the cache (kernels in csrc/flash_decode/). `flash_decode` can also append
the new tokens' keys and values to the cache, with RoPE, in the same call. The cache may be fp8
(float8_e4m3fn with float32 scales; `kv_scale` and `quantize_kv` make one)."""
from __future__ import annotations

import torch

from ._library import require_kernels_for, supported

# What the kernels exist for, as the extension reports it (csrc/generate_instantiations.py writes
# the sets with the instantiations); () without the extension. The input rules themselves, and the
# shape inference of meta and fake tensors, are the C++ op's (csrc/flash_decode/flash_decode_checks.cpp;
# the limits on new tokens, query heads per kv head and splits are in flash_decode_limits.h).
DTYPES = supported("flash_decode", "dtype")
HEAD_DIMS = supported("flash_decode", "head_dim")


def flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                 k_new: torch.Tensor | None = None, v_new: torch.Tensor | None = None,
                 block_table: torch.Tensor | None = None, rotary_cos: torch.Tensor | None = None,
                 rotary_sin: torch.Tensor | None = None, softmax_scale: float | None = None, causal: bool = True,
                 num_splits: int = 0, k_scale: torch.Tensor | None = None,
                 v_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each sequence's new tokens over its KV cache (one decode step, or a few
    speculative / chunked tokens).

    Args:
        q: ``[batch, tokens, heads_q, head_dim]``, 1 <= tokens <= 16, float16 or bfloat16, head_dim
            64 or 128.
        k_cache, v_cache: contiguous layout ``[batch, capacity, heads_kv, head_dim]``, or paged
            ``[num_pages, page_size, heads_kv, head_dim]`` (page_size a multiple of 16) with
            ``block_table``; heads_q a multiple of heads_kv (at most 16 times). Modified in place
            when k_new is given. q's dtype, or ``torch.float8_e4m3fn`` (head_dim 128) with
            k_scale and v_scale: an fp8 cache.
        cache_seqlens: int32 ``[batch]``: keys already in the cache for each sequence.
        k_new, v_new: ``[batch, tokens, heads_kv, head_dim]`` or None. When given, they are written
            into the caches at rows ``cache_seqlens[b] .. cache_seqlens[b] + tokens - 1`` and the
            tokens attend over ``cache_seqlens[b] + tokens`` keys; the caller advances
            cache_seqlens afterwards. Without them the tokens attend over ``cache_seqlens[b]`` keys
            (the new tokens' keys already being the last of them).
        block_table: int32 ``[batch, max_pages]``: sequence b's key j is in page
            ``block_table[b, j // page_size]``, row ``j % page_size``; pages in any order.
        rotary_cos, rotary_sin: ``[positions, rotary_dim / 2]``, float32 or q's dtype: rotate-half
            RoPE applied to q and k_new at positions ``cache_seqlens[b] + i`` (head dims past
            rotary_dim unchanged). Needs k_new.
        softmax_scale: None means ``1 / sqrt(head_dim)``.
        causal: the new tokens see each other causally (token i sees keys up to its own position);
            irrelevant for one token.
        num_splits: 0 picks the number of CTAs that share one sequence's keys from the SM count,
            batch, heads and cache capacity; 1..128 forces it (the results agree within rounding);
            -1 picks the count 0 would for a batch of one, whatever the batch: each sequence's keys
            then split the same way in any batch, so its rows are the same bits batched or alone
            (batch-invariant; more CTAs than 0 picks for large batches), given the same cache
            capacity or block-table width (the count depends on it) on the same GPU model.
        k_scale, v_scale: float32 ``[heads_kv]`` (one scale a kv head) or one element (one for
            all), positive, on q's device; only with an fp8 cache, which then holds ``k / k_scale``
            and ``v / v_scale`` (`quantize_kv`). The kernel dequantizes in registers (exactly:
            the scales multiply the scores and the output, not the elements), and quantizes k_new
            and v_new when appending them, saturating at +-448; this call attends the quantized
            new rows, as later calls will. q, k_new, v_new and out keep their fp16/bf16 dtype.

    Lengths, pages and positions live on the device and are checked there, before any use: a
    negative cache_seqlens, a sequence that does not fit its cache or block table, a block_table
    entry that is not a page of the cache, or a position past the rotary table makes that
    sequence's out and lse NaN and leaves its cache rows unwritten; every other sequence's outputs
    and cache rows are exactly those of a batch without it, nothing is read or written out of
    bounds, and :func:`cute_ops.check_errors` raises a :class:`cute_ops.DeviceDataError` naming
    the sequence and the value (``cute_ops.set_device_error_mode("trap")`` stops the kernel
    instead, for debugging). A NaN in the cache propagates to the rows that read it, whatever the
    split count. One kernel launch whatever the split count (the last split of each row block to
    finish merges the others). Capturable in a CUDA graph and replayable with new cache_seqlens:
    the split count depends only on shapes. Calls on different streams, and graphs, may run at the
    same time.

    Returns:
        ``(out, lse)``: out ``[batch, tokens, heads_q, head_dim]`` in q's dtype, contiguous; lse
        float32 ``[batch, heads_q, tokens]``. A token that sees no key gets out 0 and lse -inf.
    """
    require_kernels_for("flash_decode", q)
    return torch.ops.cute_ops.flash_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos,
                                           rotary_sin, softmax_scale, causal, num_splits, k_scale, v_scale)


FP8_MAX = 448.0  # the largest float8_e4m3fn value


def kv_scale(x: torch.Tensor, per_head: bool = True) -> torch.Tensor:
    """A scale for an fp8 cache of x ``[..., heads_kv, head_dim]``: its largest |x| (per kv head,
    or over all) over 448, float32, so that `quantize_kv` saturates nothing of x. Later keys larger
    than these saturate; pick the scales from calibration data with room to spare."""
    a = x.detach().abs().float()
    amax = a.amax(dim=tuple(i for i in range(x.dim()) if i != x.dim() - 2)) if per_head else a.amax()
    return (amax.clamp(min=torch.finfo(torch.float32).tiny) / FP8_MAX).reshape(-1).contiguous()


def quantize_kv(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x ``[..., heads_kv, head_dim]`` as an fp8 cache holds it: ``x * (1 / scale)`` rounded to
    float8_e4m3fn, saturated at +-448 (NaN stays NaN), as flash_decode's append quantizes (byte for
    byte in the tests; the kernel's 1 / scale is the fast-math reciprocal, which may differ from
    this one in its last bit). scale: float32, one element or one a kv head."""
    inv = 1.0 / scale.float().reshape(-1, 1)
    return (x.float() * inv).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def dequantize_kv(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An fp8 cache's values: ``x * scale`` in `dtype`."""
    return x.to(dtype) * scale.to(dtype).reshape(-1, 1)
