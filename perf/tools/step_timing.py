#!/usr/bin/env python3
"""One decode step of a LLaMA preset timed several ways in one process, with the GPU's clock,
power and temperature beside each, to tell a timing method's effect from the machine's state when
two tools disagree (session 45: perf/run_tp.py put the 70B's TP=2 step at 19773 us where
llama_breakdown.py --graph put it at 19259 on the same build and machine).

    python perf/tools/step_timing.py [--preset llama3-8b] [--batch 1] [--ctx 512]
    torchrun --nproc-per-node 2 perf/tools/step_timing.py --preset llama3-70b

The ways, in this order, each on the same captured graph (and the last on a fresh one, as run_tp
makes it): `mean 20` (20 replays back to back between two events: llama_breakdown's), `median 20 x
4` (20 rounds of 4 replays, synchronised between rounds: run_tp's), `median 20 x 1`, then `mean 20`
and `median 20 x 4` again after --load-s seconds of replays back to back (a hot GPU), then run_tp's
own decode_us (at run_tp's CTX, 512). Every rank prints its own lines: under tensor parallelism a rank that waits for
the other at each all-reduce shows there. Replay counts are fixed, the same on every rank (the
ranks' all-reduces must pair up).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from cases_llama import decode_runner  # noqa: E402
from cute_ops.models.llama import PRESETS, Llama  # noqa: E402
from cute_ops.models.llama.parallel import TensorParallel  # noqa: E402


def gpu_state() -> str:
    """SM clock, power and temperature now (NVML through torch; '?' where it is not installed)."""
    def read(fn, scale=1.0, unit=""):
        try:
            return f"{fn() * scale:.0f}{unit}"
        except Exception:  # noqa: BLE001 - pynvml missing or the query unsupported: say so in the line
            return "?"
    return (f"{read(torch.cuda.clock_rate, unit=' MHz')}, {read(torch.cuda.power_draw, 1e-3, ' W')}, "
            f"{read(torch.cuda.temperature, unit=' C')}")


def mean_us(replay, n: int) -> float:
    """n replays back to back between two events, per replay."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        replay()
    end.record()
    end.synchronize()
    return 1e3 * start.elapsed_time(end) / n


def median_us(replay, rounds: int, per_round: int) -> float:
    """The median over `rounds` of `per_round` replays, synchronised between rounds, per replay."""
    times = sorted(mean_us(replay, per_round) for _ in range(rounds))
    return times[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-8b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--load-s", type=float, default=5.0, help="seconds of replays before the second pair")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf/tools/step_timing.py: no GPU here; run it on a GPU machine")
        return 0
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tp = TensorParallel.from_torchrun(world) if world > 1 else TensorParallel()
    model = Llama.random(PRESETS[args.preset], tp=tp)
    runner = decode_runner(model, args.batch, args.ctx)
    b = args.batch
    runner.decode_step(b)  # captures the bucket's graph
    graph = runner._graphs[b][0]
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()

    def say(way: str, us: float) -> None:
        print(f"rank {tp.rank} of {tp.world_size}, {args.preset} B={b} ctx={args.ctx}: {way:<34} {us:9.1f} us  "
              f"[{gpu_state()}]", flush=True)

    say("mean 20 (llama_breakdown)", mean_us(graph.replay, 20))
    say("median 20 x 4 (run_tp)", median_us(graph.replay, 20, 4))
    say("median 20 x 1", median_us(graph.replay, 20, 1))
    # A fixed count of replays (the same on every rank) of about --load-s seconds, sized on rank 0.
    step_s = torch.tensor([mean_us(graph.replay, 5) * 1e-6], device="cuda")
    if world > 1:
        torch.distributed.broadcast(step_s, src=0)
    loads = max(1, int(args.load_s / step_s.item()))
    t0 = time.perf_counter()
    mean_us(graph.replay, loads)
    say(f"(load: {loads} replays, {time.perf_counter() - t0:.1f} s)", float("nan"))
    say("mean 20, hot", mean_us(graph.replay, 20))
    say("median 20 x 4, hot", median_us(graph.replay, 20, 4))
    del runner, graph
    torch.cuda.empty_cache()
    from run_tp import decode_us  # a fresh runner and graph, timed as perf/run_tp.py times them
    say("run_tp.decode_us (fresh graph)", decode_us(model, b))
    if world > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
