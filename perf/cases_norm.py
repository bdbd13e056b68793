"""Benchmark cases for the norm family: rms_norm and fused_add_rms_norm, LLaMA hidden sizes."""
from __future__ import annotations

import torch

import cute_ops
from cute_ops import reference as ref
from harness import Case, compiled

SHAPES = [(128, 4096), (2048, 4096), (16384, 4096), (16384, 8192)]


def _rms_norm_case(tokens: int, hidden: int, dtype: torch.dtype) -> Case:
    def setup():
        x = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
        w = torch.rand(hidden, device="cuda", dtype=dtype) + 0.5
        eager = ref.rms_norm
        comp = compiled(ref.rms_norm)
        return {"ours": lambda: cute_ops.rms_norm(x, w, 1e-6),
                "torch_eager": lambda: eager(x, w, 1e-6),
                "torch_compile": lambda: comp(x, w, 1e-6),
                "torch_rms_norm": lambda: torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6)}

    n = tokens * hidden * dtype.itemsize
    return Case("rms_norm", "norm", {"tokens": tokens, "hidden": hidden}, dtype, setup,
                bytes=2 * n + hidden * dtype.itemsize,
                impls=("ours", "torch_eager", "torch_compile", "torch_rms_norm"))


def _eager_fused_add(x, residual, w, eps):
    residual.add_(x)
    return ref.rms_norm(residual, w, eps)


def _fused_add_case(tokens: int, hidden: int, dtype: torch.dtype) -> Case:
    def setup():
        x = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
        r = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
        w = torch.rand(hidden, device="cuda", dtype=dtype) + 0.5
        comp = compiled(_eager_fused_add)
        return {"ours": lambda: cute_ops.fused_add_rms_norm(x, r, w, 1e-6),
                "torch_eager": lambda: _eager_fused_add(x, r, w, 1e-6),
                "torch_compile": lambda: comp(x, r, w, 1e-6)}

    n = tokens * hidden * dtype.itemsize
    # read x and residual, write residual and out
    return Case("fused_add_rms_norm", "norm", {"tokens": tokens, "hidden": hidden}, dtype, setup,
                bytes=4 * n + hidden * dtype.itemsize)


def cases() -> list[Case]:
    out = []
    for tokens, hidden in SHAPES:
        out.append(_rms_norm_case(tokens, hidden, torch.bfloat16))
        out.append(_fused_add_case(tokens, hidden, torch.bfloat16))
    out.append(_rms_norm_case(16384, 4096, torch.float16))
    return out
