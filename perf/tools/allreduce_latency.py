#!/usr/bin/env python3
"""A decode step's all-reduce over the GPUs of one host, each way PyTorch offers it without NVLink
multicast, as a decode graph runs it:

    torchrun --nproc-per-node 2 perf/tools/allreduce_latency.py [--rows 1 8 32] [--hidden 4096]

Ways: cute_ops.PeerAllReduce (`peer`: what the model calls, TensorParallel.all_reduce), NCCL's
all-reduce, and PyTorch's
symmetric-memory one-shot all-reduce (every rank loads the others' rows over NVLink and sums them):
`one_shot_copy` copies a plain tensor into the symmetric buffer first (what the model could call
as it is), `one_shot` reads a tensor already there (what a producer writing into the buffer, a
gemv with an `out=`, would need). Each is timed alone, 64 back to back in a CUDA graph, and between
64 `F.linear` calls of a [rows, hidden] x [hidden, hidden] projection (what the all-reduce adds to a
chain of kernels, the number a decode step pays). Results are checked against NCCL's sums first.
Prints microseconds per all-reduce on rank 0. NVLink multicast is off before anything starts
(cute_ops.models.llama.parallel.disable_multicast, which says why and refuses a setting that allows it).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # perf/: the harness

CALLS = 64  # all-reduces a graph: two a layer of a 32-layer model


def graph_us(fn, replays: int = 20) -> float:
    """fn() (which queues CALLS operations) captured in a CUDA graph: median replay time per call."""
    import torch
    import torch.distributed as dist
    from harness import time_graph_us

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (first-call setup)
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    dist.barrier()
    us, _ = time_graph_us(graph, replays)  # a fixed count: the ranks' collectives pair up
    return us / CALLS


def measure(rows: int, hidden: int, group) -> dict[str, float | str]:
    """Every way's microseconds per all-reduce of [rows, hidden] bf16 (or its error, as text)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    name = group.group_name
    torch.manual_seed(dist.get_rank())  # each rank its own rows, so a sum that misses a rank shows
    x = torch.randn(rows, hidden, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(hidden, hidden, dtype=torch.bfloat16, device="cuda") / hidden ** 0.5
    buf = symm_mem.empty(rows, hidden, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(buf, name)
    nccl_sum = x.clone()
    dist.all_reduce(nccl_sum, group=group)
    one_shot = torch.ops.symm_mem.one_shot_all_reduce_copy(buf, x, "sum", name)
    import cute_ops

    peer = cute_ops.PeerAllReduce(torch.device("cuda", torch.cuda.current_device()), group)
    peer_sum = peer(x.clone())
    torch.cuda.synchronize()
    if not torch.equal(peer_sum, nccl_sum):
        raise RuntimeError(f"rank {dist.get_rank()}: PeerAllReduce's sums differ from NCCL's")
    if not torch.equal(one_shot, nccl_sum):
        raise RuntimeError(f"rank {dist.get_rank()}: the one-shot all-reduce's sums differ from NCCL's "
                           f"(largest difference {(one_shot.float() - nccl_sum.float()).abs().max().item()})")
    out: dict[str, float | str] = {}
    y = x.clone()  # NCCL's sums in place, replay after replay: values grow, times do not
    z = x.clone()  # the peer kernel's sums in place, as NCCL's
    ways = {
        "peer": lambda: [peer(z) for _ in range(CALLS)],
        "nccl": lambda: [dist.all_reduce(y, group=group) for _ in range(CALLS)],
        "one_shot_copy": lambda: [torch.ops.symm_mem.one_shot_all_reduce_copy(buf, x, "sum", name)
                                  for _ in range(CALLS)],
        "one_shot": lambda: [torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name) for _ in range(CALLS)],
        "linear": lambda: [torch.nn.functional.linear(x, w) for _ in range(CALLS)],
        "linear+nccl": lambda: [dist.all_reduce(torch.nn.functional.linear(x, w), group=group)
                                for _ in range(CALLS)],
        "linear+peer": lambda: [peer(torch.nn.functional.linear(x, w)) for _ in range(CALLS)],
        "linear+one_shot_copy": lambda: [torch.ops.symm_mem.one_shot_all_reduce_copy(
            buf, torch.nn.functional.linear(x, w), "sum", name) for _ in range(CALLS)],
    }
    for way, fn in ways.items():
        try:
            out[way] = round(graph_us(fn), 2)
            failed = 0
        except Exception as e:  # a way this PyTorch cannot capture: say so, measure the others
            out[way] = f"failed: {type(e).__name__}: {str(e)[:120]}"
            torch.cuda.synchronize()
            failed = 1
        # Every rank goes on only if every rank got through: a rank left alone in a collective hangs.
        flag = torch.tensor([failed], device="cuda")
        dist.all_reduce(flag, group=group)
        if flag.item():
            for rest in list(ways)[list(ways).index(way) + 1:]:
                out[rest] = "not run: a way before it failed on some rank"
            break
    for way in ("peer", "nccl", "one_shot_copy"):  # what each adds to a chain of projections
        if isinstance(out.get(f"linear+{way}"), float) and isinstance(out.get("linear"), float):
            out[f"added_by_{way}"] = round(out[f"linear+{way}"] - out["linear"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32], help="decode batch sizes")
    ap.add_argument("--hidden", type=int, default=4096, help="the model's hidden size (8B: 4096, 70B: 8192)")
    args = ap.parse_args(argv)
    from cute_ops.models.llama.parallel import disable_multicast

    disable_multicast()  # before NCCL or symmetric memory start
    if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print("allreduce_latency: run it under torchrun with 2 or more GPUs, e.g. "
              "torchrun --nproc-per-node 2 perf/tools/allreduce_latency.py")
        return 0
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        print("allreduce_latency: needs CUDA GPUs")
        return 0
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        results = [(rows, measure(rows, args.hidden, dist.group.WORLD)) for rows in args.rows]
        if rank == 0:
            print(f"{torch.cuda.get_device_name()} x {dist.get_world_size()}, torch {torch.__version__}, "
                  f"hidden {args.hidden}, bf16; us per all-reduce, {CALLS} a CUDA graph")
            for rows, res in results:
                print(f"rows {rows}: " + ", ".join(f"{k} {v}" for k, v in res.items()))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
