"""RMSNorm ops: `rms_norm` and `fused_add_rms_norm` (kernels in csrc/norm/)."""
from __future__ import annotations

import torch

from . import _checks
from ._library import require_kernels, schemas_loaded


def _check_args(op: str, x: torch.Tensor, weight: torch.Tensor, eps: float,
                residual: torch.Tensor | None = None) -> None:
    _checks.check_tensor(op, "x", x, dtypes=_checks.FLOAT_DTYPES, min_ndim=1)
    _checks.check_tensor(op, "weight", weight, ndim=1)
    _checks.check_same_device(op, "x", x, weight=weight)
    _checks.check_same_dtype(op, "x", x, weight=weight)
    hidden = x.shape[-1]
    _checks.check_shape(op, "weight", weight, (hidden,))
    vec = _checks.vector_width(x.dtype)
    if hidden % vec != 0:
        raise ValueError(f"{op}: hidden size (last dim of x) must be a multiple of {vec} for {x.dtype} "
                         f"(16-byte vectors), got {hidden}")
    _checks.check_last_dim_contiguous(op, "x", x)
    if not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"{op}: eps must be a non-negative float, got {eps!r}")
    if residual is not None:
        _checks.check_tensor(op, "residual", residual)
        _checks.check_same_device(op, "x", x, residual=residual)
        _checks.check_same_dtype(op, "x", x, residual=residual)
        _checks.check_shape(op, "residual", residual, tuple(x.shape))
        _checks.check_last_dim_contiguous(op, "residual", residual)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim: ``x / sqrt(mean(x**2, -1) + eps) * weight``.

    Args:
        x: ``[..., hidden]`` CUDA tensor, float16/bfloat16/float32; the last dim contiguous and
            ``hidden`` a multiple of the 16-byte vector width (8 for 16-bit types, 4 for float32).
        weight: ``[hidden]``, same dtype as ``x``.
        eps: added to the mean square.

    Returns:
        A new contiguous tensor shaped like ``x``. The sum of squares and the scaling run in float32;
        the result is rounded once to ``x.dtype``.
    """
    _check_args("rms_norm", x, weight, eps)
    require_kernels("rms_norm")
    return torch.ops.cute_ops.rms_norm(x, weight, float(eps))


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> torch.Tensor:
    """``residual += x`` in place, then return ``rms_norm(residual, weight, eps)``, in one pass.

    This is the pre-norm step of a LLaMA layer: ``residual`` carries the stream, ``x`` is the
    output of the previous attention or MLP block. The sum is rounded to ``residual.dtype`` when it
    is stored, and the norm is taken of that stored value, so the result equals
    ``residual.add_(x); rms_norm(residual, weight, eps)``.

    Args:
        x: ``[..., hidden]``, as for :func:`rms_norm`.
        residual: shaped and typed like ``x``; updated in place.
        weight: ``[hidden]``, same dtype as ``x``.
    """
    _check_args("fused_add_rms_norm", x, weight, eps, residual)
    require_kernels("fused_add_rms_norm")
    return torch.ops.cute_ops.fused_add_rms_norm(x, residual, weight, float(eps))


def _out_like(x: torch.Tensor) -> torch.Tensor:
    # The CUDA impl returns a contiguous tensor shaped like x (csrc/norm/rms_norm_op.cpp).
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


if schemas_loaded():
    @torch.library.register_fake("cute_ops::rms_norm")
    def _rms_norm_fake(x, weight, eps):
        _check_args("rms_norm", x, weight, eps)
        return _out_like(x)

    @torch.library.register_fake("cute_ops::fused_add_rms_norm")
    def _fused_add_rms_norm_fake(x, residual, weight, eps):
        _check_args("fused_add_rms_norm", x, weight, eps, residual)
        return _out_like(x)
