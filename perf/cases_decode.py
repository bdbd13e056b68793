"""Benchmark cases for the flash_decode family: one decode step of LLaMA-3-8B attention (32 query
heads over 8 kv heads of 128, bf16, one new token) over caches of 512 to 128k keys, contiguous and
paged, against PyTorch SDPA's flash and cuDNN backends reading the same contiguous cache (and
flash-attn's flash_attn_with_kvcache where the package is installed). Bytes = the K and V rows
read, so TB/s is the cache read rate, compared with the read ceiling.

fp8 cases (shape key kv = "fp8"): the same steps over a float8_e4m3fn cache with a scale a kv head,
at FP8_POINTS; `ours_bf16_cache` (a variant, not a baseline) is our own kernel
over the bf16 cache of the same values, which issue 15's fp8 target compares with; the baselines read
the bf16 cache. Bytes are the fp8 cache's.

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
# The fp8 cases: 8k to 512k keys (B x L), most at or past issue 15's 128k.
FP8_POINTS = [(1, 8192), (1, 32768), (1, 131072), (4, 32768), (4, 131072), (16, 8192), (16, 32768), (64, 2048),
              (64, 8192)]
MAX_CACHE_BYTES = 24 << 30  # K + V; larger points are left out (B = 64 x 128k is 34 GB)
PAGE_SIZE = 64


@functools.cache
def _flash_attn_with_kvcache():
    try:
        from flash_attn import flash_attn_with_kvcache
    except ImportError:
        return None
    return flash_attn_with_kvcache


def _decode_case(batch: int, length: int, paged: bool, fp8: bool = False) -> Case:
    """One decode step over a bf16 cache, or over an fp8 one (with our bf16-cache time as a variant
    and cuDNN the one baseline)."""
    dtype = torch.bfloat16
    with_kvcache = None if fp8 else _flash_attn_with_kvcache()

    def setup():
        q = torch.randn(batch, 1, HEADS_Q, HEAD_DIM, device="cuda", dtype=dtype)
        k = torch.randn(batch, length, HEADS_KV, HEAD_DIM, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        lengths = torch.full((batch,), length, dtype=torch.int32, device="cuda")
        table = perm = None
        if paged:
            pages = length // PAGE_SIZE
            perm = torch.randperm(batch * pages, device="cuda")
            table = perm.view(batch, pages).to(torch.int32)

        def layout(t):  # paged: the sequences' pages shuffled over the pool (moved as bytes: fp8 too)
            if perm is None:
                return t
            out = torch.empty(perm.numel(), PAGE_SIZE, HEADS_KV, HEAD_DIM, device="cuda", dtype=t.dtype)
            out.view(torch.uint8)[perm] = t.view(torch.uint8).view(perm.numel(), PAGE_SIZE, HEADS_KV, -1)
            return out
        k_c, v_c = layout(k), layout(v)
        impls = {"ours": lambda: cute_ops.flash_decode(q, k_c, v_c, lengths, block_table=table)}
        if fp8:
            k_scale, v_scale = cute_ops.kv_scale(k), cute_ops.kv_scale(v)
            k8, v8 = (layout(cute_ops.quantize_kv(t, s)) for t, s in ((k, k_scale), (v, v_scale)))
            impls = {"ours": lambda: cute_ops.flash_decode(q, k8, v8, lengths, block_table=table, k_scale=k_scale,
                                                           v_scale=v_scale),
                     "ours_bf16_cache": impls["ours"]}
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # SDPA's [B, H, S, D] views
        backends = [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)]
        if not fp8:
            backends.insert(0, ("sdpa_flash", SDPBackend.FLASH_ATTENTION))
        for name, backend in backends:
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
             "cache": f"paged{PAGE_SIZE}" if paged else "contiguous", **({"kv": "fp8"} if fp8 else {})}
    kv_bytes = 2 * batch * length * HEADS_KV * HEAD_DIM * (1 if fp8 else 2)
    impls = ("ours", "ours_bf16_cache", "sdpa_cudnn") if fp8 else \
        ("ours", "sdpa_flash", "sdpa_cudnn", *(("flash_attn",) if with_kvcache else ()))
    return Case("flash_decode", "flash_decode", shape, dtype, setup, bytes=kv_bytes, impls=impls,
                read_dominated=True)


def cases() -> list[Case]:
    out = []
    points = [(b, n) for b in BATCHES for n in LENGTHS] + [(1, 16384)]
    for batch, length in sorted(points):
        if 2 * batch * length * HEADS_KV * HEAD_DIM * 2 > MAX_CACHE_BYTES:
            continue
        for paged in (False, True):
            out.append(_decode_case(batch, length, paged))
    for batch, length in FP8_POINTS:
        for paged in (False, True):
            out.append(_decode_case(batch, length, paged, fp8=True))
    return out

