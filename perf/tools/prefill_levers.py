#!/usr/bin/env python3
"""The LLaMA prefill's non-GEMM costs, lever by lever (issue 13's prefill 1.2x at B = 8 x 512):
what each one would move, timed in one process in rounds (forward, then backward: an H200 under
GEMM load sits at its power cap and its clock moves between configs). Session 70 also timed the
model's prefill with the layers before and after the first two levers (docs/perf-notes.md); the
model keeps only the faster layers, so that A/B is no longer here.

    python perf/tools/prefill_levers.py [--rows 4096] [--rounds 6]

The ops, at `rows` tokens of LLaMA-3-8B (hidden 4096, intermediate 14336, 32 / 8 heads of 128):
- o / down projection: F.linear, against addmm_ into the residual in place (cuBLAS's epilogue adds
  it: beta 1), which lets the norm after it be rms_norm instead of fused_add_rms_norm;
- those two norms;
- the MLP's pieces: cuBLAS's gate/up, swiglu, cuBLAS's down; gemm_pair as two launches (its GEMM0
  with SwiGLU in the epilogue, then GEMM1), each launch's time from the profiler; fused_mlp;
- the K/V rows' copy into the pages: index_copy_ over bf16 elements and over int64 words.
Each timing: CUDA events around `calls` back-to-back calls cycling over input sets that together
exceed L2; median over the rounds.
"""
from __future__ import annotations

import argparse
import pathlib
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import cute_ops  # noqa: E402
from harness import time_eager_us  # noqa: E402
from cute_ops.norm import fused_add_rms_norm, rms_norm  # noqa: E402

H, INTER, HQ, HKV, D = 4096, 14336, 32, 8, 128


def timed(fns, calls: int) -> float:
    """us a call: `calls` calls cycling over fns between two events (one round of the harness's
    eager timing), after one call of each."""
    for fn in fns:
        fn()
    return time_eager_us(fns, calls, replays=1)[0]


def rounds(cases: dict[str, list], n: int, calls: int) -> dict[str, list[float]]:
    names, out = list(cases), {k: [] for k in cases}
    for r in range(n):
        for name in (names if r % 2 == 0 else names[::-1]):
            out[name].append(timed(cases[name], calls))
    return out


def show(title: str, res: dict[str, list[float]]) -> None:
    print(f"== {title}")
    for k, v in res.items():
        print(f"  {k:44s} median {statistics.median(v):9.1f} us   min {min(v):9.1f}   max {max(v):9.1f}")


def ops(rows: int, n: int) -> None:
    dev, bf = "cuda", torch.bfloat16
    sets = 3

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, device=dev, dtype=bf) * scale

    # o and down with and without the residual add in the epilogue.
    o_in = [rnd(rows, H) for _ in range(sets)]
    act = [rnd(rows, INTER) for _ in range(sets)]
    res = [rnd(rows, H) for _ in range(sets)]
    wo = [rnd(H, H, scale=H ** -0.5) for _ in range(sets)]
    wd = [rnd(H, INTER, scale=INTER ** -0.5) for _ in range(2)]
    cases = {
        "o: F.linear": [lambda i=i: F.linear(o_in[i], wo[i]) for i in range(sets)],
        "o: residual.addmm_ (add in the epilogue)": [lambda i=i: res[i].addmm_(o_in[i], wo[i].t()) for i in range(sets)],
        "down: F.linear": [lambda i=i: F.linear(act[i], wd[i % 2]) for i in range(sets)],
        "down: residual.addmm_": [lambda i=i: res[i].addmm_(act[i], wd[i % 2].t()) for i in range(sets)],
    }
    show(f"projections, {rows} rows", rounds(cases, n, 24))
    w = torch.ones(H, device=dev, dtype=bf)
    norm_sets = 8
    a = [rnd(rows, H) for _ in range(norm_sets)]
    r = [rnd(rows, H) for _ in range(norm_sets)]
    cases = {
        "fused_add_rms_norm": [lambda i=i: fused_add_rms_norm(a[i], r[i], w, 1e-5) for i in range(norm_sets)],
        "rms_norm": [lambda i=i: rms_norm(r[i], w, 1e-5) for i in range(norm_sets)],
    }
    show(f"norms, {rows} rows", rounds(cases, n, 64))
    del o_in, act, res, wo, a, r

    # The MLP's pieces.
    h = [rnd(rows, H) for _ in range(2)]
    gate, up = rnd(INTER, H, scale=H ** -0.5), rnd(INTER, H, scale=H ** -0.5)
    packed = cute_ops.pack_gate_up(gate, up)
    del gate, up
    gu = [F.linear(x, packed) for x in h]
    mid = [cute_ops.swiglu(g) for g in gu]
    wd0 = wd[0]
    cases = {
        "cuBLAS gate/up": [lambda i=i: F.linear(h[i], packed) for i in range(2)],
        "swiglu": [lambda i=i: cute_ops.swiglu(gu[i]) for i in range(2)],
        "cuBLAS down": [lambda i=i: F.linear(mid[i], wd0) for i in range(2)],
        "cuBLAS gate/up + swiglu + cuBLAS down": [lambda i=i: F.linear(cute_ops.swiglu(F.linear(h[i], packed)), wd0)
                                                  for i in range(2)],
        "gemm_pair, two launches": [lambda i=i: cute_ops.gemm_pair(h[i], packed, wd0, separate_launches=True)
                                    for i in range(2)],
        "fused_mlp (one launch)": [lambda i=i: cute_ops.fused_mlp(h[i], packed, wd0) for i in range(2)],
    }
    show(f"MLP, {rows} rows", rounds(cases, n, 6))
    # gemm_pair's two launches apart: the profiler's kernel times, launches in order.
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(4 * n):
            cute_ops.gemm_pair(h[i % 2], packed, wd0, separate_launches=True)
        torch.cuda.synchronize()
    ks = sorted(((e.time_range.start, e.time_range.end - e.time_range.start, e.name) for e in prof.events()
                 if e.device_type == torch.autograd.DeviceType.CUDA and "gemm_pair" in e.name.lower()),
                key=lambda k: k[0])
    if len(ks) == 8 * n:
        first, second = [k[1] for k in ks[0::2]], [k[1] for k in ks[1::2]]
        print(f"  gemm_pair two launches, profiler: GEMM0 + SwiGLU median {statistics.median(first):.1f} us "
              f"(min {min(first):.1f}), GEMM1 median {statistics.median(second):.1f} us (min {min(second):.1f})")
    else:
        names = sorted({k[2][:80] for k in ks})
        print(f"  gemm_pair two launches, profiler: {len(ks)} kernels for {4 * n} calls, not split ({names})")
    del h, gu, mid, packed, wd

    # The K/V rows into the pages.
    qkv = [rnd(rows, (HQ + 2 * HKV) * D) for _ in range(4)]
    ks_ = [x[:, HQ * D:(HQ + HKV) * D].view(rows, HKV, D) for x in qkv]
    pages = torch.empty(4 * rows, HKV, D, device=dev, dtype=bf)
    slots = [torch.randperm(4 * rows, device=dev)[:rows] for _ in range(4)]
    cases = {
        "index_copy_ bf16": [lambda i=i: pages.index_copy_(0, slots[i], ks_[i]) for i in range(4)],
        "index_copy_ int64 words": [lambda i=i: pages.view(torch.int64).index_copy_(0, slots[i], ks_[i].view(torch.int64))
                                    for i in range(4)],
    }
    show(f"K rows into pages, {rows} rows", rounds(cases, n, 64))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("prefill_levers: no GPU here; it times CUDA kernels")
        return 0
    print(torch.cuda.get_device_name())
    with torch.inference_mode():
        ops(args.rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
