"""Flash-Decoding: attention of a few new tokens a sequence over a KV cache, contiguous or paged,
split across CTAs along the cache (kernels in csrc/flash_decode/). `flash_decode` can also append
the new tokens' keys and values to the cache, with RoPE, in the same call."""
from __future__ import annotations

import torch

from . import _checks
from ._library import require_kernels, require_supported_configs, schemas_loaded, supported

# What the kernels exist for, as the extension reports it (csrc/generate_instantiations.py writes
# the sets with the instantiations); () without the extension, whose absence _check_args reports.
DTYPES = supported("flash_decode", "dtype")
HEAD_DIMS = supported("flash_decode", "head_dim")
MAX_NEW_TOKENS = 16
MAX_SPLITS = 128


def _check_16bit(op: str, name: str, t, q: torch.Tensor, ndim: int) -> None:
    _checks.check_tensor(op, name, t, dtypes=DTYPES, ndim=ndim)
    _checks.check_same_device(op, "q", q, **{name: t})
    _checks.check_same_dtype(op, "q", q, **{name: t})
    _checks.check_vector_strides(op, name, t)


def _check_args(op, q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos, rotary_sin,
                softmax_scale, causal, num_splits) -> None:
    require_supported_configs(op)
    _check_16bit(op, "q", q, q, 4)
    batch, new_tokens, heads_q, head_dim = q.shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{op}: head_dim must be one of {HEAD_DIMS}, got q of shape {tuple(q.shape)}")
    if not 1 <= new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"{op}: q must hold 1 to {MAX_NEW_TOKENS} new tokens a sequence ([batch, tokens, heads, "
                         f"head_dim]), got shape {tuple(q.shape)}")
    _check_16bit(op, "k_cache", k_cache, q, 4)
    _check_16bit(op, "v_cache", v_cache, q, 4)
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"{op}: v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    heads_kv = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"{op}: the cache's head_dim ({k_cache.shape[3]}) differs from q's ({head_dim})")
    if heads_kv < 1 or heads_q % heads_kv or heads_q // heads_kv > 16:
        raise ValueError(f"{op}: q's head count ({heads_q}) must be a multiple of the cache's ({heads_kv}), at most "
                         f"16 times it")
    _checks.check_tensor(op, "cache_seqlens", cache_seqlens, dtypes=(torch.int32,), ndim=1)
    _checks.check_same_device(op, "q", q, cache_seqlens=cache_seqlens)
    if cache_seqlens.shape[0] != batch or not cache_seqlens.is_contiguous():
        raise ValueError(f"{op}: cache_seqlens must be contiguous with one length per sequence ({batch}), got "
                         f"shape {tuple(cache_seqlens.shape)}")
    if block_table is None:
        if k_cache.shape[0] != batch:
            raise ValueError(f"{op}: a contiguous cache is [batch ({batch}), capacity, heads_kv, head_dim], got "
                             f"{tuple(k_cache.shape)} (a paged cache needs block_table)")
    else:
        _checks.check_tensor(op, "block_table", block_table, dtypes=(torch.int32,), ndim=2)
        _checks.check_same_device(op, "q", q, block_table=block_table)
        if block_table.shape[0] != batch or (block_table.shape[1] > 1 and block_table.stride(1) != 1):
            raise ValueError(f"{op}: block_table must be [batch ({batch}), max_pages] with contiguous rows, got "
                             f"shape {tuple(block_table.shape)} strides {block_table.stride()}")
        if k_cache.shape[1] % 16 or k_cache.shape[0] < 1:
            raise ValueError(f"{op}: a paged cache is [num_pages, page_size, heads_kv, head_dim] with at least one "
                             f"page and page_size a multiple of 16, got {tuple(k_cache.shape)}")
    if (k_new is None) != (v_new is None):
        raise ValueError(f"{op}: k_new and v_new go together")
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if t is not None:
            _check_16bit(op, name, t, q, 4)
            _checks.check_shape(op, name, t, (batch, new_tokens, heads_kv, head_dim))
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError(f"{op}: rotary_cos and rotary_sin go together")
    if rotary_cos is not None:
        if k_new is None:
            raise ValueError(f"{op}: rotary_cos/rotary_sin rotate the new tokens, so they need k_new and v_new")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            _checks.check_tensor(op, name, t, dtypes=(torch.float32, q.dtype), ndim=2)
            _checks.check_same_device(op, "q", q, **{name: t})
            _checks.check_last_dim_contiguous(op, name, t)
        if (rotary_cos.shape != rotary_sin.shape or rotary_cos.stride() != rotary_sin.stride()
                or rotary_cos.dtype != rotary_sin.dtype):
            raise ValueError(f"{op}: rotary_cos and rotary_sin must match in shape, strides and dtype")
        if not 1 <= rotary_cos.shape[1] <= head_dim // 2:
            raise ValueError(f"{op}: rotary_cos is [positions, rotary_dim / 2] with rotary_dim <= head_dim "
                             f"({head_dim}), got shape {tuple(rotary_cos.shape)}")
    _checks.check_attention_options(op, softmax_scale, causal)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"{op}: num_splits must be an int from 0 (automatic) to {MAX_SPLITS}, got {num_splits!r}")


def flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                 k_new: torch.Tensor | None = None, v_new: torch.Tensor | None = None,
                 block_table: torch.Tensor | None = None, rotary_cos: torch.Tensor | None = None,
                 rotary_sin: torch.Tensor | None = None, softmax_scale: float | None = None, causal: bool = True,
                 num_splits: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each sequence's new tokens over its KV cache (one decode step, or a few
    speculative / chunked tokens).

    Args:
        q: ``[batch, tokens, heads_q, head_dim]``, 1 <= tokens <= 16, float16 or bfloat16, head_dim
            64 or 128.
        k_cache, v_cache: contiguous layout ``[batch, capacity, heads_kv, head_dim]``, or paged
            ``[num_pages, page_size, heads_kv, head_dim]`` (page_size a multiple of 16) with
            ``block_table``; heads_q a multiple of heads_kv (at most 16 times). Modified in place
            when k_new is given.
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
            batch, heads and cache capacity; 1..128 forces it (the results agree within rounding).

    Lengths, pages and positions live on the device and are checked there, before any use: a
    negative cache_seqlens, a sequence that does not fit its cache or block table, a block_table
    entry that is not a page of the cache, or a position past the rotary table makes that
    sequence's out and lse NaN and leaves its cache rows unwritten; every other sequence's outputs
    and cache rows are exactly those of a batch without it, nothing is read or written out of
    bounds, and :func:`cute_ops.check_errors` raises a :class:`cute_ops.DeviceDataError` naming
    the sequence and the value (``cute_ops.set_device_error_mode("trap")`` stops the kernel
    instead, for debugging). A NaN in the cache propagates to the rows that read it, whatever the
    split count. Capturable in a CUDA graph and replayable with new cache_seqlens: the split count
    depends only on shapes.

    Returns:
        ``(out, lse)``: out ``[batch, tokens, heads_q, head_dim]`` in q's dtype, contiguous; lse
        float32 ``[batch, heads_q, tokens]``. A token that sees no key gets out 0 and lse -inf.
    """
    _check_args("flash_decode", q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos,
                rotary_sin, softmax_scale, causal, num_splits)
    require_kernels("flash_decode")
    return torch.ops.cute_ops.flash_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos,
                                           rotary_sin, None if softmax_scale is None else float(softmax_scale),
                                           causal, num_splits)


if schemas_loaded():
    @torch.library.register_fake("cute_ops::flash_decode")
    def _flash_decode_fake(q, k_cache, v_cache, cache_seqlens, k_new=None, v_new=None, block_table=None,
                           rotary_cos=None, rotary_sin=None, softmax_scale=None, causal=True, num_splits=0):
        _check_args("flash_decode", q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table, rotary_cos,
                    rotary_sin, softmax_scale, causal, num_splits)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
        return out, lse
