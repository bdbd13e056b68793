"""Plain PyTorch versions of the ops. Tests call them on float32/float64 copies as the reference;
benchmarks call them in the working dtype as the `torch_eager` and `torch_compile` baselines."""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm as a LLaMA model writes it, with float32 (or wider) statistics."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.to(acc)).to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(out, new_residual)``; the sum is rounded to the residual's dtype first."""
    new_residual = (residual.to(torch.float32) + x.to(torch.float32)).to(residual.dtype) \
        if residual.dtype != torch.float64 else residual + x
    return rms_norm(new_residual, weight, eps), new_residual


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                     cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Out-of-place rotate-half RoPE; returns new ``(q, k)``."""
    rot_dim = cos_sin_cache.shape[1]
    half = rot_dim // 2
    acc = torch.promote_types(q.dtype, torch.float32)
    cs = cos_sin_cache[positions.long()].to(acc)            # [..., rot_dim]
    cos, sin = cs[..., :half].unsqueeze(-2), cs[..., half:].unsqueeze(-2)  # [..., 1, half]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.to(acc)
        x1, x2, rest = xf[..., :half], xf[..., half:rot_dim], xf[..., rot_dim:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1).to(x.dtype)

    return rotate(q), rotate(k)
