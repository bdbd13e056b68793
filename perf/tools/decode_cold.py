#!/usr/bin/env python3
"""flash_decode as a decode step meets it, against back to back, for the model's shape (LLaMA-3-8B:
32 query heads, 8 kv heads, head dim 128, one new token with RoPE and the append, a paged cache).
A tuning aid for the small-batch attention, not the benchmark: the kernel's device time comes from
the profiler, so the attention (with the merge of its splits, in the same launch since session 27)
is timed alone. Cases, each over `--calls` caches (one a layer, as a model has):

  back to back        the calls one after another: code, table and rope tables hot in L2
  after a sweep       each call after a read of 4 x L2 (its code and small inputs evicted)
  sweep + warm-up     the same, then a call on another, small cache before the timed one (its code
                      back in L2 and the instruction caches, its cache data still cold)
  after qkv           each call after the layer's qkv gemv (one weight a call, evict-first in L2,
                      the attention launched early as in the model), q, k_new, v_new its output
  qkv + warm-up       the same with the warm-up call between them

"attention" is the timed kernel's end less the previous kernel's end (it launches early and waits);
"from sweep" is its end less the end of the sweep or the gemv. Written in session 24, first run in
session 48 (docs/perf-notes.md).

    python perf/tools/decode_cold.py [--batch 1] [--ctx 512] [--splits 0]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import cute_ops  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--splits", type=int, default=0)
    ap.add_argument("--calls", type=int, default=32)
    args = ap.parse_args()
    b, ctx, hq, hk, d, page, hidden = args.batch, args.ctx, 32, 8, 128, 64, 4096
    dev, dt = "cuda", torch.bfloat16
    pages_per_seq = (ctx + 64 + page - 1) // page
    # One cache per call, as a model has one per layer.
    caches = [(torch.randn(b * pages_per_seq, page, hk, d, device=dev, dtype=dt),
               torch.randn(b * pages_per_seq, page, hk, d, device=dev, dtype=dt)) for _ in range(args.calls)]
    table = torch.randperm(b * pages_per_seq, device=dev, dtype=torch.int32).view(b, pages_per_seq)
    seqlens = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    angles = torch.arange(ctx + 64, device=dev, dtype=torch.float32)[:, None] * torch.rand(d // 2, device=dev)
    cos, sin = angles.cos(), angles.sin()
    q = torch.randn(b, 1, hq, d, device=dev, dtype=dt)
    k_new = torch.randn(b, 1, hk, d, device=dev, dtype=dt)
    v_new = torch.randn(b, 1, hk, d, device=dev, dtype=dt)
    # The warm-up call's own small cache (same kernel: same dtype, head dim, paging and new tokens).
    warm_k = torch.randn(b * 2, page, hk, d, device=dev, dtype=dt)
    warm_v = torch.randn_like(warm_k)
    warm_table = torch.arange(b * 2, device=dev, dtype=torch.int32).view(b, 2)
    warm_lens = torch.full((b,), 64, device=dev, dtype=torch.int32)
    l2 = torch.cuda.get_device_properties().L2_cache_size
    sweep = torch.empty(4 * l2 // 2, device=dev, dtype=dt).normal_()
    x = torch.randn(b, hidden, device=dev, dtype=dt)
    norm_w = torch.rand(hidden, device=dev, dtype=dt) + 0.5
    wqkv = [torch.randn((hq + 2 * hk) * d, hidden, device=dev, dtype=dt) / hidden ** 0.5 for _ in range(args.calls)]

    def attend(qq, kk, vv, k_cache, v_cache):
        cute_ops.flash_decode(qq, k_cache, v_cache, seqlens, kk, vv, table, cos, sin, num_splits=args.splits)

    def warm_up(qq, kk, vv):
        cute_ops.flash_decode(qq, warm_k, warm_v, warm_lens, kk, vv, warm_table, cos, sin)

    def calls(case: str) -> None:
        for i, (k_cache, v_cache) in enumerate(caches):
            qq, kk, vv = q, k_new, v_new
            if case.startswith("after a sweep") or case.startswith("sweep"):
                sweep.sum()
            elif "qkv" in case:
                qkv = cute_ops.gemv(x, wqkv[i], norm_w, 1e-5)
                qq = qkv[:, :hq * d].view(b, 1, hq, d)
                kk = qkv[:, hq * d:(hq + hk) * d].view(b, 1, hk, d)
                vv = qkv[:, (hq + hk) * d:].view(b, 1, hk, d)
            if "warm" in case:
                warm_up(qq, kk, vv)
            attend(qq, kk, vv, k_cache, v_cache)

    print(f"{torch.cuda.get_device_name()}: B={b} ctx={ctx} Hq={hq} Hkv={hk} D={d} paged {page}, "
          f"splits {args.splits or 'default'}; us a call (median over {args.calls} calls)")
    print("| case | attention | from sweep / gemv end |\n|---|---|---|")
    for case in ("back to back", "after a sweep", "sweep + warm-up", "after qkv", "qkv + warm-up"):
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            calls(case)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            calls(case)
        graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        spans = sorted((ev.time_range.start, ev.time_range.end, "flash_decode_kernel" in ev.name)
                       for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA)
        # The timed call is the last attention kernel before the next other kernel (or the end).
        attention, from_pre = [], []
        prev_end = pre_end = None
        for j, (start, end, is_attention) in enumerate(spans):
            last_of_run = j + 1 == len(spans) or not spans[j + 1][2]
            if is_attention and last_of_run:
                attention.append(end - (prev_end if prev_end is not None else start))
                if pre_end is not None:
                    from_pre.append(end - pre_end)
            if not is_attention:
                pre_end = end
            prev_end = end

        def median(xs: list[float]) -> str:
            return f"{sorted(xs)[len(xs) // 2]:.1f}" if xs else "-"

        print(f"| {case} | {median(attention)} | {median(from_pre) if case != 'back to back' else '-'} |")


if __name__ == "__main__":
    main()
