"""Benchmark cases for the flash_decode family: one decode step of LLaMA-3-8B attention (32 query
heads over 8 kv heads of 128, bf16, one new token) over caches of 512 to 128k keys, contiguous and
paged, against PyTorch SDPA's flash and cuDNN backends reading the same contiguous cache (and
flash-attn's flash_attn_with_kvcache where the package is installed). Bytes = the K and V rows
read, so TB/s is the cache read rate, compared with the read ceiling.

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

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128
BATCHES = [1, 4, 16, 64]
LENGTHS = [512, 2048, 8192, 32768, 131072]
MAX_CACHE_BYTES = 24 << 30  # K + V; larger points are left out (B = 64 x 128k is 34 GB)
PAGE_SIZE = 64


@functools.cache
def _flash_attn_with_kvcache():
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return None
    return flash_attn_with_kvcache


def _decode_case(batch: int, length: int, paged: bool) -> Case:
    dtype = torch.bfloat16
    with_kvcache = _flash_attn_with_kvcache()

    def setup():
        q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, device="cuda", dtype=dtype)
        k = torch.randn(batch, length, HEADS_KV, HEAD_DIM, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        lengths = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        if paged:
            pages = length // PAGE_SIZE
            perm = torch.randperm(batch * pages, device="cuda")
            k_pages, v_pages = (torch.empty(batch * pages, PAGE_SIZE, HEADS_KV, HEAD_DIM, device="cuda", dtype=dtype)
                                for _ in range(2))
            k_pages[perm] = k.view(batch * pages, PAGE_SIZE, HEADS_KV, HEAD_DIM)
            v_pages[perm] = v.view(batch * pages, PAGE_SIZE, HEADS_KV, HEAD_DIM)
            table = perm.view(batch, pages).to(torch.int32)
            impls = {"ours": lambda: cute_ops.flash_decode(q, k_pages, v_pages, lengths, block_table=table)}
        else:
            impls = {"ours": lambda: cute_ops.flash_decode(q, k, v, lengths)}
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # SDPA's [B, H, S, D] views
        for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
            def sdpa(backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
            try:
                sdpa()
            except RuntimeError:  # the backend refuses this configuration
                continue
            impls[name] = sdpa
        if with_kvcache is not None:
            impls["flash_attn"] = lambda: with_kvcache(q, k, v, cache_seqlens=lengths)
        return impls

    shape = {"B": batch, "L": length, "Hq": HEADS_Q, "Hkv": HEADS_KV, "D": HEAD_DIM,
             "cache": f"paged{PAGE_SIZE}" if paged else "contiguous"}
    kv_bytes = 2 * batch * length * HEADS_KV * HEAD_DIM * 2
    return Case("flash_decode", "flash_decode", shape, dtype, setup, bytes=kv_bytes,
                impls=("ours", "sdpa_flash", "sdpa_cudnn", *(("flash_attn",) if with_kvcache else ())),
                read_dominated=True)


def cases() -> list[Case]:
    out = []
    points = [(b, n) for b in BATCHES for n in LENGTHS] + [(1, 16384)]
    for batch, length in sorted(points):
        if 2 * batch * length * HEADS_KV * HEAD_DIM * 2 > MAX_CACHE_BYTES:
            continue
        for paged in (False, True):
            out.append(_decode_case(batch, length, paged))
    return out
