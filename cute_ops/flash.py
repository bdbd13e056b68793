"""Exact attention, FlashAttention-2 forward: `flash_fwd` (a padded batch) and `flash_fwd_varlen`
(packed sequences of different lengths), kernels in csrc/flash_fwd/; `flash_attn_func` and
`flash_attn_varlen_func` call them the way flash-attn's functions of those names are called.
Forward only: backward through either op raises."""
from __future__ import annotations

import torch

from ._library import require_kernels_for, schemas_loaded, supported

# What the kernels exist for, as the extension reports it (csrc/generate_instantiations.py writes
# the sets with the instantiations); () without the extension. The input rules themselves, and the
# shape inference of meta and fake tensors, are the C++ ops' (csrc/flash_fwd/flash_fwd_checks.cpp).
DTYPES = supported("flash_fwd", "dtype")
HEAD_DIMS = supported("flash_fwd", "head_dim")
# The head dims of the sm90 kernel (arch="sm90"): all of HEAD_DIMS today; a head dim added to the
# sm80 kernel alone would be missing here.
SM90_HEAD_DIMS = supported("flash_fwd", "head_dim", arch="sm90")


def flash_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
              causal: bool = False, arch: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Exact softmax attention of a batch of equal-length sequences: for each query head h,
    ``softmax(q_h @ k_g.T * softmax_scale) @ v_g`` with kv head ``g = h // (heads_q // heads_kv)``.

    Args:
        q: ``[batch, seqlen_q, heads_q, head_dim]`` CUDA tensor, float16 or bfloat16; head_dim one of
            64, 96, 128, 256. An empty batch or seqlen_q = 0 gives empty outputs.
        k: ``[batch, seqlen_k, heads_kv, head_dim]``, q's dtype and device; heads_q a multiple of
            heads_kv (grouped-query / multi-query attention); seqlen_k >= 1, since a softmax over
            no keys is undefined.
        v: k's shape, q's dtype.
        softmax_scale: multiplies ``q @ k.T`` before the softmax; None means ``1 / sqrt(head_dim)``.
        causal: mask with the diagonal aligned bottom-right (as flash-attn >= 2.1): query i sees the
            keys ``j <= i + seqlen_k - seqlen_q``. A query that sees no key (seqlen_q > seqlen_k)
            gets out = 0 and lse = -inf.
        arch: which kernel runs. ``"sm80"``: the FlashAttention-2 kernel (mma.sync, cp.async), every
            head dim, on compute capability 8.x and newer. ``"sm90"``: the warp-specialised Hopper
            kernel (wgmma, TMA), on 9.x only, for the head dims in ``SM90_HEAD_DIMS`` (all of
            them) and no broadcast (stride-0) dimension; a call it cannot take raises ValueError. ``"auto"``
            (the default): ``"sm90"`` wherever it can take the call, else ``"sm80"``.

    Each tensor's last dim must be contiguous and its other strides multiples of 8 elements, with
    the data 16-byte aligned; views such as slices of a fused QKV projection work as they are.

    Returns:
        ``(out, lse)``: out a new contiguous tensor shaped like q in q's dtype; lse the float32
        log-sum-exp of each query's scaled scores (the softmax denominator), ``[batch, heads_q,
        seqlen_q]``, contiguous.
    """
    require_kernels_for("flash_fwd", q)
    return torch.ops.cute_ops.flash_fwd(q, k, v, softmax_scale=softmax_scale, causal=causal, arch=arch)


def flash_fwd_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                     softmax_scale: float | None = None, causal: bool = False,
                     arch: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`flash_fwd` over a packed batch of sequences of different lengths, with no padding.

    Sequence b is rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and ``cu_seqlens_k[b]:
    cu_seqlens_k[b+1]`` of k and v; it attends only within itself, with the causal alignment and
    the rule for queries that see no key applied per sequence. A sequence may be empty; one with no
    keys gives each of its queries out = 0 and lse = -inf.

    Args:
        q: ``[total_q, heads_q, head_dim]``, as for :func:`flash_fwd` without the batch dim.
        k: ``[total_k, heads_kv, head_dim]``.
        v: k's shape.
        cu_seqlens_q: int32 ``[batch + 1]`` on q's device, contiguous: 0, then the running total of
            the query lengths, ending at total_q.
        cu_seqlens_k: the same for the key lengths; the same length as cu_seqlens_q.
        max_seqlen_q: an int >= 1, at least every query length.
        max_seqlen_k: an int >= 1, at least every key length.
        softmax_scale, causal: as for :func:`flash_fwd`.
        arch: as for :func:`flash_fwd`. With ``"sm90"`` a second, small kernel runs first: the
            offsets' checks and the fills of rows outside the sequences (the main kernel only
            skips a bad sequence).

    The offsets live on the device and are checked there, not on the host (which would need a
    sync): a sequence whose offsets are not within the rows of q (k) in order, or that is longer
    than max_seqlen_q (max_seqlen_k), gets NaN in its rows of out and lse, nothing is read or
    written out of bounds, the other sequences are computed as usual, and
    :func:`cute_ops.check_errors` raises a :class:`cute_ops.DeviceDataError` naming it. Rows of q
    before ``cu_seqlens_q[0]`` or after ``cu_seqlens_q[-1]`` (padding of a fixed-size buffer)
    belong to no sequence and get out = 0 and lse = -inf. Overlapping sequences (a decreasing
    cu_seqlens) are reported where the offsets decrease; the rows they share are then undefined.

    Returns:
        ``(out, lse)``: out ``[total_q, heads_q, head_dim]``, contiguous, q's dtype; lse float32
        ``[heads_q, total_q]``, contiguous.
    """
    require_kernels_for("flash_fwd_varlen", q)
    return torch.ops.cute_ops.flash_fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                               softmax_scale=softmax_scale, causal=causal, arch=arch)


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, softmax_scale: float | None = None,
                    causal: bool = False, return_lse: bool = False):
    """Attention with flash-attn's layout and arguments (``[batch, seqlen, heads, head_dim]``,
    bottom-right causal): see :func:`flash_fwd`. Returns out, or ``(out, lse)`` when return_lse.

    The options are keyword-only: flash-attn's fourth positional argument is ``dropout_p``, which
    this forward-only op does not have, so a positional call ported from flash-attn must fail
    rather than take the dropout rate as the scale."""
    out, lse = flash_fwd(q, k, v, softmax_scale, causal)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *,
                           softmax_scale: float | None = None, causal: bool = False, return_lse: bool = False):
    """Packed variable-length attention with flash-attn's arguments: see :func:`flash_fwd_varlen`.
    Returns out, or ``(out, lse)`` when return_lse. The options are keyword-only, as for
    :func:`flash_attn_func` (flash-attn's next positional argument is ``dropout_p``)."""
    out, lse = flash_fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                softmax_scale, causal)
    return (out, lse) if return_lse else out


def _backward_not_implemented(op: str):
    def backward(ctx, grad_out, grad_lse):
        raise NotImplementedError(
            f"cute_ops.{op}: backward is not implemented yet; call it under torch.no_grad() or "
            f"torch.inference_mode() for inference, and use torch.nn.functional.scaled_dot_product_attention "
            f"where gradients are needed")
    return backward


if schemas_loaded():
    # Until the backward kernels exist, a graph that reaches these ops must fail at backward time
    # rather than treat them as constants and return missing grads. Nothing is saved for backward.
    torch.library.register_autograd("cute_ops::flash_fwd", _backward_not_implemented("flash_fwd"))
    torch.library.register_autograd("cute_ops::flash_fwd_varlen", _backward_not_implemented("flash_fwd_varlen"))
