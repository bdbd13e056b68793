#!/usr/bin/env python3
"""Where the time of a LLaMA decode step goes: the kernels of one step (profiled on eager steps,
the same kernels the step's CUDA graph replays, or with --graph on the replays themselves), their
device time per op (overlaps of kernels started early by programmatic dependent launch given to
the kernel they wait for), with the bytes each op must read and its rate against the copy
ceiling, next to the graph-replayed step time (the difference is idle time between kernels).

    python perf/tools/llama_breakdown.py [--preset llama3-8b] [--batch 1] [--ctx 512]
    torchrun --nproc-per-node 2 perf/tools/llama_breakdown.py ...   # tensor parallel: rank 0's kernels

Under torchrun every rank runs the same steps (the all-reduces pair up) and rank 0 prints (or
--rank R: comparing two ranks' tables shows whether one waits for the other); the bytes column is
then one rank's share.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pathlib
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from cases_llama import decode_runner  # noqa: E402
from cute_ops.models.llama import PRESETS, Llama  # noqa: E402
from cute_ops.models.llama.__main__ import copy_ceiling_tbs  # noqa: E402
from cute_ops.models.llama.parallel import ALL_REDUCE_KINDS, TensorParallel  # noqa: E402

# Kernel name fragments -> the op they belong to (first match wins).
GROUPS = [("peer_all_reduce", "all-reduce (peer_all_reduce)"), ("nccl", "NCCL (the logits' all-gather; all-reduces)"),
          ("flash_decode", "flash_decode (RoPE + append + attention + merge)"),
          ("gemm_pair", "fused_mlp (gate/up, SwiGLU, down)"),
          ("rms_norm", "rms_norm / fused_add_rms_norm"),
          ("embedding", "embedding"), ("indexSelect", "embedding"),
          ("gemv", "cuBLAS (qkv, o, lm_head)"), ("gemm", "cuBLAS (qkv, o, lm_head)"),
          ("nvjet", "cuBLAS (qkv, o, lm_head)"), ("cutlass", "cuBLAS (qkv, o, lm_head)")]


# cute_ops' gemv kernels (plain or stream-K) by their template flags <T, norm, residual, swiglu>
# (batches up to 8).
GEMV_GROUPS = {("true", "false", "false"): "gemv: qkv, lm_head (norm folded in)",
               ("false", "true", "false"): "gemv: o, down (residual add folded in)",
               ("false", "false", "false"): "gemv: o, down (a rank above 0: no residual)",
               ("true", "false", "true"): "gemv: gate/up (norm and SwiGLU folded in)"}


def group_of(name: str) -> str:
    flags = re.search(r"gemv_(?:stream_k_|exchange_)?kernel<[^,]+, (\w+), (\w+), (\w+)[,>]", name)
    if flags:
        return GEMV_GROUPS.get(flags.groups(), "gemv: other")
    return next((g for key, g in GROUPS if key in name), "other: " + name[:60])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-8b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="also print N kernels of the last profiled step from its third layer on: start, end and "
                         "the gap to the previous kernel's end (us), to see where a layer's time goes")
    ap.add_argument("--rank", type=int, default=0,
                    help="under torchrun, the rank whose kernels are printed (every rank profiles its own)")
    ap.add_argument("--all-reduce", default="auto", choices=ALL_REDUCE_KINDS,
                    help="TensorParallel's all_reduce_kind under torchrun (pushed: PeerAllReduce.gemv)")
    ap.add_argument("--graph", action="store_true",
                    help="profile the step's CUDA-graph replays instead of eager steps (eager steps of a "
                         "tensor-parallel model are bound by the host's launches, which spreads the kernels out)")
    args = ap.parse_args()
    cfg = PRESETS[args.preset]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if not 0 <= args.rank < world:
        ap.error(f"--rank {args.rank}: this run has ranks 0-{world - 1}")
    tp = TensorParallel.from_torchrun(world) if world > 1 else TensorParallel()
    tp = dataclasses.replace(tp, all_reduce_kind=args.all_reduce)
    model = Llama.random(cfg, tp=tp)
    runner = decode_runner(model, args.batch, args.ctx)  # sequences at position ctx over a random cache
    cache = runner.cache
    b = args.batch
    runner.decode_step(b)  # captures the bucket's graph

    def step_eager():
        model.decode(runner._tokens[:b], runner._seqlens[:b], runner._table[:b], cache)

    for _ in range(3):
        runner.decode_step(b)
        step_eager()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        runner.decode_step(b)
    end.record()
    end.synchronize()
    graph_ms = start.elapsed_time(end) / 20

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            if args.graph:
                runner.decode_step(b)
            else:
                step_eager()
        torch.cuda.synchronize()
    # Kernels launched with programmatic dependent launch start before their predecessor ends
    # and wait: their durations overlap. Each instant of device time goes to the kernel that
    # started first among those running (the one the others wait for), so the groups' times add
    # up to the device's busy time.
    per_group: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    kernels = sorted((ev.time_range.start, ev.time_range.end, group_of(ev.name)) for ev in prof.events()
                     if ev.device_type == torch.autograd.DeviceType.CUDA)
    covered = float("-inf")
    for start, end, g in kernels:
        per_group[g] += max(0.0, end - max(start, covered)) / args.steps
        counts[g] += 1
        covered = max(covered, end)
    if tp.rank != args.rank:
        return
    esz = 2 / tp.world_size  # bytes an element, over the ranks: one rank's share of each weight
    layer = cfg.hidden_size
    bytes_of = {
        "fused_mlp (gate/up, SwiGLU, down)": cfg.num_layers * 3 * cfg.intermediate_size * layer * esz,
        "cuBLAS (qkv, o, lm_head)": (cfg.num_layers * (cfg.q_size + 2 * cfg.kv_size + cfg.q_size) * layer
                                     + cfg.vocab_size * layer) * esz,
        "flash_decode (RoPE + append + attention + merge)": cfg.num_layers * b * args.ctx * 2 * cfg.kv_size * esz,
        "rms_norm / fused_add_rms_norm": 0,
        GEMV_GROUPS["true", "false", "false"]: (cfg.num_layers * (cfg.q_size + 2 * cfg.kv_size)
                                                + cfg.vocab_size) * layer * esz,
        GEMV_GROUPS["false", "true", "false"]: cfg.num_layers * (cfg.q_size + cfg.intermediate_size) * layer * esz,
        GEMV_GROUPS["true", "false", "true"]: cfg.num_layers * 2 * cfg.intermediate_size * layer * esz,
    }
    ceiling = copy_ceiling_tbs("cuda")
    total_kernels = sum(per_group.values())
    print(f"{torch.cuda.get_device_name()} (rank {tp.rank} of {tp.world_size}), {args.preset} bf16, batch {b}, ctx {args.ctx}: graph-replayed step "
          f"{graph_ms * 1e3:.0f} us; device busy in a profiled step {total_kernels:.0f} us; copy ceiling "
          f"{ceiling:.2f} TB/s")
    print(f"| op | kernels / step | us / step | share | bytes read (MB) | TB/s | of copy ceiling |\n"
          f"|---|---|---|---|---|---|---|")
    for g, us in sorted(per_group.items(), key=lambda kv: -kv[1]):
        by = bytes_of.get(g, 0)
        rate = by / (us * 1e-6) / 1e12 if by else 0
        print(f"| {g} | {counts[g] // args.steps} | {us:.0f} | {us / (graph_ms * 1e3):.0%} | {by / 1e6:.0f} | "
              f"{rate:.2f} | {rate / ceiling:.0%} |")
    print(f"| idle between kernels (graph step - busy) | | {graph_ms * 1e3 - total_kernels:.0f} | "
          f"{1 - total_kernels / (graph_ms * 1e3):.0%} | | | |")
    if args.timeline:
        names = sorted((ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
                       if ev.device_type == torch.autograd.DeviceType.CUDA)
        per_step = len(names) // args.steps
        first = len(names) - per_step + 2 + 2 * per_step // cfg.num_layers  # the last step's third layer
        window = names[first:first + args.timeline]
        t0 = window[0][0]
        print("\n| kernel | start | end | duration | gap to the previous end |\n|---|---|---|---|---|")
        prev_end = names[first - 1][1]
        for start, end, name in window:
            short = group_of(name)
            print(f"| {short[:48]} | {start - t0:.1f} | {end - t0:.1f} | {end - start:.1f} | {start - prev_end:.1f} |")
            prev_end = end


if __name__ == "__main__":
    main()
