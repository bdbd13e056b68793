#!/usr/bin/env python3
"""What the in-kernel append costs: flash_decode in the LLaMA model's decode geometry (32 query heads,
8 kv heads, head dim 128, a paged cache of pages of 64 with capacity ctx + 64, block tables in random
page order), timed three ways over the same cache bytes:

- ``append``: one new token with RoPE, appended by the kernel (what the model calls);
- ``no_rope``: the same append without RoPE;
- ``read``: no new token; the cache already holds ctx + 1 keys (the same keys attended, no writes).

Timing as the benchmark's (perf/harness.py): CUDA-graph replay of calls cycling over input sets whose
caches together exceed L2 three times, median of replays. A tuning aid, not the benchmark.

    python perf/tools/decode_append.py [--shapes 8x4096,64x512,32x4096,1x4096]
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

HQ, HK, D, PAGE = 32, 8, 128, 64


def _setup(b: int, ctx: int, mode: str):
    import cute_ops

    dev, dt = "cuda", torch.bfloat16
    pages = (ctx + 64 + PAGE - 1) // PAGE
    k_pages = torch.randn(b * pages, PAGE, HK, D, device=dev, dtype=dt)
    v_pages = torch.randn_like(k_pages)
    table = torch.randperm(b * pages, device=dev, dtype=torch.int32).view(b, pages)
    angles = torch.arange(ctx + 64, device=dev, dtype=torch.float32)[:, None] * torch.rand(D // 2, device=dev)
    cos, sin = angles.cos(), angles.sin()
    q = torch.randn(b, 1, HQ, D, device=dev, dtype=dt)
    k_new = torch.randn(b, 1, HK, D, device=dev, dtype=dt)
    v_new = torch.randn_like(k_new)
    if mode == "read":
        lens = torch.full((b,), ctx + 1, device=dev, dtype=torch.int32)
        return lambda: cute_ops.flash_decode(q, k_pages, v_pages, lens, block_table=table)
    # The append writes row ctx of every call; the length stays ctx, so every replay does the same work.
    lens = torch.full((b,), ctx, device=dev, dtype=torch.int32)
    rot = (cos, sin) if mode == "append" else (None, None)
    return lambda: cute_ops.flash_decode(q, k_pages, v_pages, lens, k_new, v_new, table, *rot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="8x4096,64x512,32x4096,1x4096,1x512,16x2048")
    args = ap.parse_args()
    from harness import Case, _time_impl

    modes = ("append", "no_rope", "read")
    print(f"{torch.cuda.get_device_name()}: Hq {HQ}, Hkv {HK}, D {D}, paged {PAGE}, capacity ctx + 64; "
          "us a call (graph replay over rotated inputs)")
    print("| B x ctx | " + " | ".join(modes) + " | append - read |\n|---|" + "---|" * (len(modes) + 1))
    l2 = torch.cuda.get_device_properties().L2_cache_size
    for shape in args.shapes.split(","):
        b, ctx = map(int, shape.split("x"))
        kv_bytes = 2 * b * (ctx + 64) * HK * D * 2
        sets = max(1, min(64, -(-3 * l2 // kv_bytes)))
        times = {}
        for mode in modes:
            fns = [_setup(b, ctx, mode) for _ in range(sets)]
            case = Case("flash_decode_append", "flash_decode", {"B": b, "ctx": ctx}, torch.bfloat16, lambda: {})
            times[mode], _ = _time_impl(case, "ours", fns, max(16, sets))
            del fns
            torch.cuda.empty_cache()
        cells = " | ".join(f"{times[m]:.1f}" for m in modes)
        print(f"| {b} x {ctx} | {cells} | {times['append'] - times['read']:+.1f} |", flush=True)


if __name__ == "__main__":
    main()
