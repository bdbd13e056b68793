#!/usr/bin/env python3
"""flash_decode as a decode step meets it: after a kernel that has swept L2 (a layer's weights do),
against back to back, for the model's shape (LLaMA-3-8B: 32 query heads, 8 kv heads, head dim 128,
one new token with RoPE and the append, a paged cache). A tuning aid for the small-batch attention,
not the benchmark: the kernel's device time comes from the profiler, so the attention (with the
merge of its splits, since session 27 in the same launch) is timed alone, after the sweep when
there is one. Written in Session 24 to test whether the attention's code size is what it pays for
after a sweep (docs/perf-notes.md); it had not run on a GPU when committed.

    python perf/tools/decode_cold.py [--batch 1] [--ctx 512] [--splits 0]
"""
from __future__ import annotations

import argparse
import collections
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
    b, ctx, hq, hk, d, page = args.batch, args.ctx, 32, 8, 128, 64
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
    l2 = torch.cuda.get_device_properties().L2_cache_size
    sweep = torch.empty(8 * l2 // 2, device=dev, dtype=dt).normal_()  # 8 x L2: a layer's weights

    def calls(with_sweep: bool) -> None:
        for k_cache, v_cache in caches:
            if with_sweep:
                sweep.sum()
            cute_ops.flash_decode(q, k_cache, v_cache, seqlens, k_new, v_new, table, cos, sin,
                                  num_splits=args.splits)

    print(f"{torch.cuda.get_device_name()}: B={b} ctx={ctx} Hq={hq} Hkv={hk} D={d} paged {page}, "
          f"splits {args.splits or 'default'}; us a call (median over {args.calls} calls)")
    print("| case | attention kernel | end to end |\n|---|---|---|")
    for with_sweep in (False, True):
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            calls(with_sweep)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            calls(with_sweep)
        graph.replay()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        spans = sorted((ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
                       if ev.device_type == torch.autograd.DeviceType.CUDA)
        per: dict[str, list[float]] = collections.defaultdict(list)
        ends: list[float] = []  # from the sweep's end to the call's last kernel's end
        prev_end = sweep_end = call_end = None
        for start, end, name in spans:
            if "flash_decode_kernel" in name:
                # Launched early (PDL), it waits for the kernel before it: timed from that one's end.
                per["attention"].append(end - max(start, prev_end if prev_end is not None else start))
                call_end = end
            else:  # the sweep (one kernel or more)
                if call_end is not None and sweep_end is not None:
                    ends.append(call_end - sweep_end)
                call_end = None
                sweep_end = end
            prev_end = end
        if call_end is not None and sweep_end is not None:
            ends.append(call_end - sweep_end)

        def median(xs: list[float]) -> str:
            return f"{sorted(xs)[len(xs) // 2]:.1f}" if xs else "-"

        print(f"| {'after an L2 sweep' if with_sweep else 'back to back'} | {median(per['attention'])} | "
              f"{median(ends) if with_sweep else '-'} |")


if __name__ == "__main__":
    main()
