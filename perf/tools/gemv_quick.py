#!/usr/bin/env python3
"""Quick A/B of gemv variants on the LLaMA-3-8B projections (a tuning aid, not the benchmark):
each configuration timed as a CUDA graph of calls cycling over enough weight copies to defeat L2.

    python perf/tools/gemv_quick.py [M ...]
"""
from __future__ import annotations

import sys

import torch

import cute_ops


def time_us(fn, copies: int) -> float:
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for i in range(copies):
            fn(i)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for i in range(copies):
            fn(i)
    graph.replay()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / copies)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ms = [int(a) for a in sys.argv[1:]] or [1, 8]
    l2 = torch.cuda.get_device_properties().L2_cache_size
    shapes = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096),
              "lm_head": (4096, 128256)}
    print("| proj | M | variant | us | TB/s |\n|---|---|---|---|---|")
    for name, (k, n) in shapes.items():
        copies = max(2, -(-3 * l2 // (n * k * 2)))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5 for _ in range(copies)]
        nw = torch.rand(k, device="cuda", dtype=torch.bfloat16) + 0.5
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
            variants = {"plain": lambda i: cute_ops.gemv(x, ws[i]),
                        "norm": lambda i: cute_ops.gemv(x, ws[i], nw),
                        "residual": lambda i: cute_ops.gemv(x, ws[i], residual=res),
                        "swiglu": lambda i: cute_ops.gemv(x, ws[i], activation="swiglu"),
                        "norm_swiglu": lambda i: cute_ops.gemv(x, ws[i], nw, activation="swiglu"),
                        "cublas": lambda i: torch.nn.functional.linear(x, ws[i])}
            for v, fn in variants.items():
                us = time_us(fn, copies)
                print(f"| {name} | {m} | {v} | {us:.1f} | {n * k * 2 / us / 1e6:.2f} |")
        del ws


if __name__ == "__main__":
    main()
