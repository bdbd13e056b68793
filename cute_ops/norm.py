"""RMSNorm ops: `rms_norm` and `fused_add_rms_norm` (kernels in csrc/norm/). The input rules, and
the shape inference that meta and fake tensors use, are the C++ op's (csrc/norm/rms_norm_checks.cpp):
these wrappers add documentation and a clear message when the kernels were not built."""
from __future__ import annotations

import torch

from ._library import require_kernels_for


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
    require_kernels_for("rms_norm", x)
    return torch.ops.cute_ops.rms_norm(x, weight, eps)


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
    require_kernels_for("fused_add_rms_norm", x)
    return torch.ops.cute_ops.fused_add_rms_norm(x, residual, weight, eps)
