"""Rotary position embedding (RoPE): the `rotary_embedding` op (csrc/rope/; its input rules and shape
inference are the C++ op's, csrc/rope/rotary_checks.cpp) and the cos/sin cache it reads, with
LLaMA's base-theta frequencies and the llama3 long-context frequency scaling."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._library import require_kernels_for


@dataclass(frozen=True)
class Llama3RopeScaling:
    """The llama3 (3.1+) frequency rule: long wavelengths are slowed by ``factor``, short ones kept,
    and the band between is interpolated smoothly. Defaults are LLaMA-3.1's."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


def rope_inv_freq(rot_dim: int, theta: float = 10000.0,
                  scaling: Llama3RopeScaling | None = None) -> torch.Tensor:
    """Inverse frequencies ``theta ** (-2i / rot_dim)`` for i < rot_dim/2, float64 on the CPU,
    rescaled by ``scaling`` when given."""
    if rot_dim <= 0 or rot_dim % 2:
        raise ValueError(f"rope_inv_freq: rot_dim must be a positive even number, got {rot_dim}")
    if theta <= 0:
        raise ValueError(f"rope_inv_freq: theta must be positive, got {theta}")
    inv_freq = theta ** (-torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    if scaling is None:
        return inv_freq
    s = scaling
    if not s.high_freq_factor > s.low_freq_factor:
        raise ValueError("Llama3RopeScaling: high_freq_factor must exceed low_freq_factor")
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = s.original_max_position / s.low_freq_factor    # longer than this: slowed fully
    high_freq_wavelen = s.original_max_position / s.high_freq_factor  # shorter than this: unchanged
    smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    return torch.where(wavelen < high_freq_wavelen, inv_freq,
                       torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, blended))


def rope_cos_sin_cache(rot_dim: int, max_position: int, theta: float = 10000.0,
                       scaling: Llama3RopeScaling | None = None, dtype: torch.dtype = torch.float32,
                       device: torch.device | str | None = None) -> torch.Tensor:
    """The ``[max_position, rot_dim]`` table read by :func:`rotary_embedding`: row p holds
    ``cos(p * inv_freq)`` in its first ``rot_dim/2`` columns and ``sin(p * inv_freq)`` after.
    Computed in float64, then cast to ``dtype`` (float32 keeps the angles exact to float32; the
    op also accepts q's dtype)."""
    if max_position <= 0:
        raise ValueError(f"rope_cos_sin_cache: max_position must be positive, got {max_position}")
    inv_freq = rope_inv_freq(rot_dim, theta, scaling)
    angles = torch.outer(torch.arange(max_position, dtype=torch.float64), inv_freq)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype=dtype, device=device)


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                     cos_sin_cache: torch.Tensor) -> None:
    """Apply rotate-half RoPE to ``q`` and ``k`` in place.

    For each token t and head, the first ``rot_dim`` dims of the head are split into halves
    (x1, x2) and replaced by ``(x1*cos - x2*sin, x2*cos + x1*sin)`` at angle row ``positions[t]``
    of ``cos_sin_cache``; dims past ``rot_dim`` are left alone.

    Args:
        q: ``[..., num_heads, head_dim]`` (e.g. ``[tokens, H, D]`` or ``[B, S, H, D]``), fp16/bf16/
            fp32. Only the last dim must be contiguous, so views of a fused QKV output work.
        k: ``[..., num_kv_heads, head_dim]`` with q's leading dims and dtype.
        positions: int64 or int32, shaped like q's leading dims; each in ``[0, max_position)``.
            Checked on the device: a token whose position is outside the table gets NaN in its
            rotated dims of q and k (nothing is read out of bounds) and the error is recorded for
            :func:`cute_ops.check_errors` (see there for the "trap" debug mode).
        cos_sin_cache: ``[max_position, rot_dim]`` from :func:`rope_cos_sin_cache`, float32 or q's dtype.
    """
    require_kernels_for("rotary_embedding", q)
    torch.ops.cute_ops.rotary_embedding(q, k, positions, cos_sin_cache)
