"""Benchmark cases for the rope family: LLaMA-3-8B attention heads (32 q, 8 kv, head_dim 128)."""
from __future__ import annotations

import torch

import cute_ops
from cute_ops import reference as ref
from harness import Case, compiled

HQ, HKV, D = 32, 8, 128
TOKENS = [128, 2048, 16384]
MAX_POS = 8192


def _eager_rope(q, k, pos, cache):
    rq, rk = ref.rotary_embedding(q, k, pos, cache)
    q.copy_(rq)
    k.copy_(rk)


def _rope_case(tokens: int, dtype: torch.dtype) -> Case:
    def setup():
        # q and k as views of one fused QKV projection output, as a LLaMA layer produces them.
        qkv = torch.randn(tokens, (HQ + 2 * HKV) * D, device="cuda", dtype=dtype)
        q = qkv[:, : HQ * D].view(tokens, HQ, D)
        k = qkv[:, HQ * D: (HQ + HKV) * D].view(tokens, HKV, D)
        pos = torch.arange(tokens, device="cuda") % MAX_POS  # a prefill: consecutive positions
        cache = cute_ops.rope_cos_sin_cache(D, MAX_POS, theta=500000.0,
                                            scaling=cute_ops.Llama3RopeScaling(), device="cuda")
        comp = compiled(_eager_rope)
        return {"ours": lambda: cute_ops.rotary_embedding(q, k, pos, cache),
                "torch_eager": lambda: _eager_rope(q, k, pos, cache),
                "torch_compile": lambda: comp(q, k, pos, cache)}

    qk = tokens * (HQ + HKV) * D * dtype.itemsize
    # q and k read and written, plus each token's position and cos/sin row
    return Case("rotary_embedding", "rope", {"tokens": tokens, "Hq": HQ, "Hkv": HKV, "D": D}, dtype,
                setup, bytes=2 * qk + tokens * (8 + D * 4))


def cases() -> list[Case]:
    return [_rope_case(t, torch.bfloat16) for t in TOKENS]
