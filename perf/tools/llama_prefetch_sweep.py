#!/usr/bin/env python3
"""The LLaMA decode step with each layer's gate/up weight prefetched into L2 during its attention
(Llama.l2_prefetch_bytes), at several prefetch sizes, against none: a device run while choosing
the default. Under torchrun over N GPUs, rank 0 alone first (one GPU), then all N; alone, one GPU.

    torchrun --nproc-per-node 2 perf/tools/llama_prefetch_sweep.py [--mb 0 8 16 24] [--batch 1 8]
    python perf/tools/llama_prefetch_sweep.py --preset llama3-8b --mb 0 16 32 48

Prints ms a step (CUDA-graph replay, as perf/run_tp.py times it), each size's ratio to none, for
each model, batch and GPU count; rank 0 prints. Rounds alternate the sizes, so drift in the
machine's clocks falls on all of them alike.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, nargs="+", default=[0, 8, 16, 24], help="prefetch sizes, MiB (0: none)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--preset", nargs="+", default=["llama3-8b"], help="model presets (llama3-70b needs 2+ GPUs)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("llama_prefetch_sweep: needs a CUDA GPU")
        return 0
    from run_tp import decode_us

    from cute_ops.models.llama import PRESETS, Llama
    from cute_ops.models.llama.parallel import TensorParallel

    world = int(os.environ.get("WORLD_SIZE", "1"))
    tp = TensorParallel.from_torchrun(world)
    lead = tp.rank == 0
    sizes = [int(mb * 2**20) for mb in args.mb]

    def sweep(model, label):
        for b in args.batch:
            times = {s: [] for s in sizes}
            for _ in range(args.rounds):
                for s in sizes:
                    model.l2_prefetch_bytes = s
                    times[s].append(decode_us(model, b))
            best = {s: min(t) for s, t in times.items()}
            if lead:
                base = best[sizes[0]]
                cells = ", ".join(f"{s / 2**20:g} MiB {best[s] / 1e3:.3f} ms ({best[s] / base:.3f})" for s in sizes)
                print(f"{label} B={b}: {cells}", flush=True)
        model.l2_prefetch_bytes = 0

    for preset in args.preset:
        cfg = PRESETS[preset]
        if world > 1 and preset == "llama3-8b":
            if lead:  # one GPU: rank 0 alone, the others wait
                model = Llama.random(cfg)
                sweep(model, f"{preset} tp=1")
                del model
                torch.cuda.empty_cache()
            import torch.distributed as dist

            dist.barrier()
        if world == 1 and preset != "llama3-8b":
            continue
        model = Llama.random(cfg, tp=tp)
        sweep(model, f"{preset} tp={world}")
        del model
        torch.cuda.empty_cache()
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
