#!/usr/bin/env python3
"""A LLaMA decode step's kernels (or with --prefill, a prefill's), ours against the gpt-fast-style
compiled baseline, side by side: each side's steps profiled (the decode steps graph-replayed, as the
benchmark runs them), its kernels grouped by kind (a name's first words), the device time a step per
group. For the points where the two are close (decode at B = 32, 64; prefill at 8 x 512) and the
difference has to be found kernel by kernel. Not the benchmark (perf/run.py times both).

    python perf/tools/llama_vs_baseline.py [--batch 64] [--ctx 512]
    python perf/tools/llama_vs_baseline.py --prefill [--batch 8] [--ctx 512]   # ctx: each prompt's length
    python perf/tools/llama_vs_baseline.py --prefill --gaps 8   # also where the idle time between kernels is

--gaps N: the N pairs of kernel kinds (the one before, the one after) with the most idle device time
between them a step. Idle time there means the GPU waited for the host: a slow launch path, an
allocation, or a sync before the second kernel.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from cases_llama import decode_runner, prefill_runner  # noqa: E402
from llama_baseline import GptFastLlama  # noqa: E402
from cute_ops.models.llama import PRESETS, Llama  # noqa: E402


def kind(name: str) -> str:
    """A kernel's group: its name without template arguments, launch bounds and numbered suffixes."""
    name = re.sub(r"<.*", "", name.replace("void ", "").replace("(anonymous namespace)::", ""))
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"_\d+$", "", name)
    for key in ("nvjet", "gemv", "splitKreduce", "gemmk1", "triton_per", "triton_poi", "triton_red"):
        if key in name:
            return key
    return name.split("::")[-1][:40]


def gaps(kernels: list[tuple[str, float, float]], steps: int) -> list[tuple[str, str, float, float, float]]:
    """Idle device time between consecutive kernels (name, start, end; us), grouped by the kinds
    of the kernel that ended last before the gap and the one after it: (before, after, us a step,
    gaps a step, longest), the most idle first. A kernel that starts before the previous ones have
    all ended leaves no gap."""
    total, count, longest = collections.defaultdict(float), collections.Counter(), collections.defaultdict(float)
    ordered = sorted(kernels, key=lambda k: k[1])
    if not ordered:
        return []
    last_name, busy_until = ordered[0][0], ordered[0][2]
    for name, start, end in ordered[1:]:
        gap = start - busy_until
        if gap > 0:
            pair = (kind(last_name), kind(name))
            total[pair] += gap
            count[pair] += 1
            longest[pair] = max(longest[pair], gap)
        if end > busy_until:
            last_name, busy_until = name, end
    return sorted(((a, b, total[(a, b)] / steps, count[(a, b)] / steps, longest[(a, b)]) for a, b in total),
                  key=lambda g: -g[2])


def kernel_span_us(kernels: list[tuple[str, float, float]], steps: int) -> float:
    """The profiled steps' device span a step: the first kernel's start to the last one's end. Set
    against the event-timed step, what it lacks is time outside the kernels' span (host work before
    the first launch, a synchronising call between steps), not gaps between kernels."""
    if not kernels:
        return 0.0
    return (max(k[2] for k in kernels) - min(k[1] for k in kernels)) / steps


def profile_step(step, steps: int) -> tuple[float, dict[str, float], dict[str, int], list, list[float]]:
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    # 20 steps back to back, an event before each and after the last: the mean, and each step's own
    # time (an outlier step points at an allocator's synchronising free or other host work).
    events = [torch.cuda.Event(enable_timing=True) for _ in range(21)]
    for i in range(20):
        events[i].record()
        step()
    events[20].record()
    torch.cuda.synchronize()
    step_us = events[0].elapsed_time(events[20]) * 1e3 / 20
    each_us = [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(20)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    us, count, kernels = collections.defaultdict(float), collections.Counter(), []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            us[kind(ev.name)] += (ev.time_range.end - ev.time_range.start) / steps
            count[kind(ev.name)] += 1
            kernels.append((ev.name, ev.time_range.start, ev.time_range.end))
    return step_us, us, {k: v // steps for k, v in count.items()}, kernels, each_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-8b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prefill", action="store_true", help="a prefill of batch x ctx tokens instead of a decode step")
    ap.add_argument("--gaps", type=int, default=0, metavar="N",
                    help="also the N pairs of kernel kinds with the most idle time between them")
    args = ap.parse_args()
    if args.gaps < 0:
        ap.error("--gaps takes a count of rows, 0 or more")
    model = Llama.random(PRESETS[args.preset])
    b, ctx = args.batch, args.ctx
    if args.prefill:  # as perf/cases_llama.py's prefill case calls both
        ours, tokens, pos = prefill_runner(model, b, ctx)
        base = torch.compile(GptFastLlama(model, b, ctx), fullgraph=True)
        theirs = lambda: base(tokens, pos)  # noqa: E731
    else:
        runner = decode_runner(model, b, ctx)
        base = torch.compile(GptFastLlama(model, b, ctx + 16), mode="reduce-overhead", fullgraph=True)
        idx = torch.ones(b, 1, dtype=torch.int64, device="cuda")
        pos = torch.tensor([ctx], device="cuda")
        ours = lambda: runner.decode_step(b)  # noqa: E731
        theirs = lambda: base(idx, pos)  # noqa: E731
    sides = {"ours": profile_step(ours, args.steps), "gptfast_compile": profile_step(theirs, args.steps)}
    print(f"{torch.cuda.get_device_name()}, {args.preset} bf16, {'prefill' if args.prefill else 'decode'} B={b}, "
          f"ctx {ctx}: " + ", ".join(f"{k} {v[0]:.0f} us" for k, v in sides.items()))
    for name, (step_us, us, count, kernels, each_us) in sides.items():
        each = sorted(each_us)
        print(f"\n{name}: {step_us:.0f} us a step (steps one by one: min {each[0]:.0f}, median {each[10]:.0f}, "
              f"max {each[-1]:.0f}); profiled steps' kernel span {kernel_span_us(kernels, args.steps):.0f} a step, "
              f"kernels busy {sum(us.values()):.0f}\n| kernel kind | a step | us |\n|---|---|---|")
        for k, v in sorted(us.items(), key=lambda kv: -kv[1]):
            print(f"| {k} | {count[k]} | {v:.0f} |")
        if args.gaps:
            found = gaps(kernels, args.steps)
            print(f"\n{name}: idle between kernels {sum(g[2] for g in found):.0f} us a step; the most idle pairs:\n"
                  "| before | after | us a step | gaps a step | longest us |\n|---|---|---|---|---|")
            for before, after, idle, n, longest in found[:args.gaps]:
                print(f"| {before} | {after} | {idle:.0f} | {n:g} | {longest:.1f} |")


if __name__ == "__main__":
    main()
