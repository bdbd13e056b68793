"""Benchmark cases for the gemv family: the projections of a LLaMA-3-8B decode step (H 4096,
I 14336, 32 q and 8 kv heads of 128, vocab 128256, bf16) at 1 and 8 rows, each with what the model
folds into it (the norm before qkv, gate/up and the output projection, the residual add after o and
down). Baselines: the same math in PyTorch eager and through torch.compile, and `F.linear` alone
(cuBLAS, the matmul without the norm or the add: the least a cuBLAS path runs). Bytes = the weight
plus x, out and the residual, nearly all the weight: TB/s is its read rate, against the read
ceiling."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import cute_ops
from cute_ops import reference as ref
from harness import Case, compiled

HIDDEN, INTER, Q, KV, VOCAB = 4096, 14336, 4096, 1024, 128256
# name: (k, weight rows, folds)
PROJECTIONS = {"qkv": (HIDDEN, Q + 2 * KV, "norm"), "o": (Q, HIDDEN, "residual"),
               "gate_up": (HIDDEN, 2 * INTER, "norm_swiglu"), "down": (INTER, HIDDEN, "residual"),
               "lm_head": (HIDDEN, VOCAB, "norm")}
M_SIZES = [1, 8]


@functools.cache
def _compiled():
    return compiled(ref.gemv)


def _case(proj: str, m: int) -> Case:
    k, n, folds = PROJECTIONS[proj]
    dtype = torch.bfloat16
    cols = n // 2 if "swiglu" in folds else n

    def setup():
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        weight = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
        kw = {}
        if "norm" in folds:
            kw.update(norm_weight=(1 + 0.1 * torch.randn(k, device="cuda")).to(dtype), eps=1e-5)
        if "residual" in folds:
            kw["residual"] = torch.randn(m, cols, device="cuda", dtype=dtype)
        if "swiglu" in folds:
            kw["activation"] = "swiglu"
        compiled = _compiled()
        return {"ours": lambda: cute_ops.gemv(x, weight, **kw),
                "torch_eager": lambda: ref.gemv(x, weight, **kw),
                "torch_compile": lambda: compiled(x, weight, **kw),
                "cublas_linear": lambda: F.linear(x, weight)}

    moved = n * k * 2 + m * k * 2 + m * cols * 2 * (2 if "residual" in folds else 1)
    return Case("gemv", "gemv", {"proj": proj, "M": m, "K": k, "N": n}, dtype, setup, bytes=moved,
                flops=2 * m * n * k, impls=("ours", "torch_eager", "torch_compile", "cublas_linear"),
                read_dominated=True)


def cases() -> list[Case]:
    return [_case(proj, m) for proj in PROJECTIONS for m in M_SIZES]
