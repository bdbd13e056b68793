"""gemv: the projections of a decode step, ``act(rms_norm(x) @ weight.T) + residual`` for up to 8
rows of x, reading the weight once at the memory rate (kernel in csrc/gemv/). The input rules and
shape inference are the C++ op's (csrc/gemv/gemv_checks.cpp)."""
from __future__ import annotations

import torch

from ._library import require_kernels_for

# Rows of x one call takes (kGemvMaxRows in csrc/gemv/gemv_limits.h; tests/test_gemv.py holds the
# two together): the tokens of a small decode batch.
MAX_ROWS = 8


def gemv(x: torch.Tensor, weight: torch.Tensor, norm_weight: torch.Tensor | None = None, eps: float = 1e-6,
         residual: torch.Tensor | None = None, activation: str = "none") -> torch.Tensor:
    """``F.linear`` for a decode batch, with the neighbouring steps of a LLaMA layer folded in.

    ``out = act(x' @ weight.T)``, then ``out + residual`` when a residual is given, where ``x'`` is
    ``rms_norm(x, norm_weight, eps)`` when ``norm_weight`` is given and ``x`` otherwise. One launch,
    which on Hopper starts while the previous kernel of the stream finishes (programmatic dependent
    launch) and streams the weight at close to the copy rate for any ``m <= 8``.

    Args:
        x: ``[m, k]`` CUDA tensor, float16/bfloat16, ``m <= 8``, ``k`` a multiple of 8, last dim
            contiguous (rows may be strided, 16-byte aligned).
        weight: ``[n, k]``, same dtype, contiguous (``nn.Linear`` layout). For ``"swiglu"``: gate and
            up rows packed by :func:`~cute_ops.pack_gate_up`, and the output has ``n / 2`` columns.
        norm_weight: ``[k]``: RMS-normalise x first. Since ``1 / rms(x)`` is one scalar a row, the
            kernel multiplies the products of ``x * norm_weight`` (each rounded to x's dtype once)
            by it in float32 after the sum; the sum of squares is float32, as in
            :func:`~cute_ops.rms_norm`. One rounding of the normalised input either way, at a
            different point: results agree with ``F.linear(rms_norm(x, norm_weight), weight)`` to
            the rounding of that input.
        eps: the norm's epsilon.
        residual: ``[m, cols]``: added to the product after it is rounded to x's dtype, and the sum
            rounded again, as ``F.linear(...) + residual`` would.
        activation: ``"none"`` or ``"swiglu"`` (``silu(gate) * up``, float32, rounded once).

    Returns:
        A new ``[m, cols]`` tensor of x's dtype. Products accumulate in float32, in an order that
        does not depend on ``m``: each row of the result is what the call with that row alone gives.
    """
    require_kernels_for("gemv", x)
    return torch.ops.cute_ops.gemv(x, weight, norm_weight, eps, residual, activation)
