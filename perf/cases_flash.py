"""Benchmark cases for the flash_fwd family: the FlashAttention-2 paper's grid (16k tokens per
batch, hidden size 2048) and LLaMA-3-8B prefill, against PyTorch SDPA's flash and cuDNN backends and,
where it is installed, the flash-attn package; on Hopper, where "auto" runs the sm90 kernel,
the sm80 kernel forced (`ours_sm80`) as a variant.

No torch_compile baseline: Inductor's attention pattern matcher
(torch/_inductor/fx_passes/fuse_attention.py) rewrites the matmul-softmax-matmul of an eager
attention into aten.scaled_dot_product_attention, so it would time SDPA again, whose backends are
measured here directly; and compiling every shape would cost minutes of GPU time a run."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import cute_ops
from harness import Case

SEQLENS = [512, 2048, 8192, 16384]
TOKENS = 16384   # batch * seqlen
HIDDEN = 2048    # heads * head_dim


@functools.cache
def _flash_attn_func():
    """flash-attn's flash_attn_func where the package imports, else None."""
    try:
        from flash_attn import flash_attn_func
    except ImportError:
        return None
    return flash_attn_func


def _sdpa(q, k, v, backend: SDPBackend, causal: bool):
    """SDPA with one backend on [B, H, S, D] tensors."""
    gqa = q.shape[1] != k.shape[1]

    def call():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return call


def _flash_case(batch: int, seqlen: int, heads_q: int, heads_kv: int, head_dim: int, causal: bool,
                dtype: torch.dtype) -> Case:
    flash_attn_func = _flash_attn_func()

    def setup():
        q = torch.randn(batch, seqlen, heads_q, head_dim, device="cuda", dtype=dtype)
        k = torch.randn(batch, seqlen, heads_kv, head_dim, device="cuda", dtype=dtype)
        v = torch.randn(batch, seqlen, heads_kv, head_dim, device="cuda", dtype=dtype)
        impls = {"ours": lambda: cute_ops.flash_fwd(q, k, v, causal=causal)}
        # Where "auto" runs the sm90 kernel, the FlashAttention-2 kernel beside it, forced.
        if torch.cuda.get_device_capability()[0] == 9 and head_dim in cute_ops.flash.SM90_HEAD_DIMS:
            impls["ours_sm80"] = lambda: cute_ops.flash_fwd(q, k, v, causal=causal, arch="sm80")
        # SDPA reads the same tensors through [B, H, S, D] views. Its causal mask is aligned
        # top-left, the same as ours only because every case here has seqlen_q == seqlen_k.
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            sdpa = _sdpa(qt, kt, vt, backend, causal)
            try:
                sdpa()
            except RuntimeError:  # the backend does not support this configuration
                continue
            impls[name] = sdpa
        if flash_attn_func is not None:
            impls["flash_attn"] = lambda: flash_attn_func(q, k, v, causal=causal)
        return impls

    shape = {"B": batch, "Sq": seqlen, "Sk": seqlen, "Hq": heads_q, "Hkv": heads_kv, "D": head_dim,
             "causal": causal}
    flops = 4 * batch * heads_q * seqlen * seqlen * head_dim  # QK^T and PV, 2 flops per multiply-add
    return Case("flash_fwd", "flash_fwd", shape, dtype, setup, flops=flops // 2 if causal else flops,
                impls=("ours", "ours_sm80", "sdpa_flash", "sdpa_cudnn", *(("flash_attn",) if flash_attn_func else ())))


def cases() -> list[Case]:
    out = []
    for dtype in (torch.bfloat16, torch.float16):
        for head_dim in (64, 128, 256):  # issue 16's head dims, each over the whole grid
            for causal in (False, True):
                for seqlen in SEQLENS:
                    heads = HIDDEN // head_dim
                    out.append(_flash_case(TOKENS // seqlen, seqlen, heads, heads, head_dim, causal, dtype))
    # LLaMA-3-8B prefill: 32 query heads sharing 8 kv heads.
    for seqlen in (4096, 8192):
        out.append(_flash_case(1, seqlen, 32, 8, 128, True, torch.bfloat16))
    return out
