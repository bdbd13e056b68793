#!/usr/bin/env python3
"""Tensor-parallel LLaMA benchmark, over the GPUs of one host:

    torchrun --nproc-per-node 2 perf/run_tp.py          # perf/results/<gpu>x2.json (h200x2.json)

Every rank runs the same steps; rank 0 writes the results file and prints the table. Cases (random
bf16 weights, each rank drawing its own part; decode over a cache of `CTX` keys a sequence):

- llama3-8b decode at B in DECODE_8B, on one GPU (rank 0 alone, `tp` 1) and over all of them: the
  tensor-parallel rows name the one-GPU time as their baseline `tp1`, so 'vs best' is the speedup.
- llama3-70b decode at B in DECODE_70B and a prefill of PREFILL_70B, over all the GPUs (it does not
  fit on one). Its floor: each GPU's weights and KV rows read at the read ceiling measured here.

`ours` is the model's decode step as it runs by default (TensorParallel's all_reduce_kind "auto":
cute_ops.PeerAllReduce for a decode step's rows). A tensor-parallel decode row also reports,
measured in the same run: `step_us_one_shot`, the step with PyTorch's symmetric-memory one-shot
all-reduce (kind "one_shot"); `step_us_nccl`, with NCCL's (kind "nccl"); `step_us_folded`, with
each all-reduce folded into the gemvs around it (cute_ops.GemvExchange; where the batch takes
gemv, B <= 8); `step_us_pushed`, with the row-parallel gemvs pushing their rows into PeerAllReduce's inboxes
themselves (kind "pushed": PeerAllReduce.gemv; where the batch takes gemv, B <= 8; at B = 1 what
`ours` does too, AUTO_PUSH_MAX_ROWS);
`step_us_no_allreduce`, with the all-reduces left out (wrong sums: timing only);
`allreduce_us_per_step`, our step's time over that one (what the all-reduces cost it), and the
same for the other ways (`allreduce_us_per_step_one_shot`, `_nccl`, `_folded`, `_pushed`);
`allreduce_us_each` / `_one_shot` / `_nccl`, one all-reduce of [B, hidden] alone, in a graph of 64;
`step_us_ours_again`, our step timed once more after all the others: how far the run drifted
between the first and the last timing (the same step read 1.5% apart in session 68), which bounds
what a difference between the columns can mean.
Timing is CUDA-graph replay of STEP_CALLS decode steps (prefill: eager calls), a fixed number of
rounds on every rank (the ranks' collectives must pair up, so no rank may size its rounds from
its own timings), median over rounds.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch  # noqa: E402

from harness import Case, ceilings  # noqa: E402
from report import gpu_slug  # noqa: E402
from run import RESULTS, commit, new_doc, row, table  # noqa: E402

from cases_llama import decode_runner, prefill_runner  # noqa: E402
from cute_ops.gemv import MAX_ROWS as GEMV_MAX_ROWS  # noqa: E402
from cute_ops.models.llama import PRESETS, Llama  # noqa: E402
from cute_ops.models.llama.__main__ import all_reduce_us  # noqa: E402
from cute_ops.models.llama.parallel import TensorParallel  # noqa: E402

CTX = 512
DECODE_8B = [1, 8, 32]
DECODE_70B = [1, 8]
PREFILL_70B = (1, 2048)
STEP_CALLS = 4      # decode steps per graph replay
ROUNDS = 20         # timed replays (decode) or calls (prefill), the same on every rank
TIMING = (f"decode: CUDA-graph replay of {STEP_CALLS} steps (Generator.decode_step's graph), median of {ROUNDS} "
          f"replays after 3, per step; prefill: eager calls, median of {ROUNDS // 2} after 3; the same fixed counts "
          "on every rank")


def _median_us(fn, rounds: int, per_round: int) -> float:
    """Median over `rounds` of fn() (timed with CUDA events), per call, in us."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end) / per_round)
    return sorted(times)[len(times) // 2]


def _kv_bytes(cfg, batch: int, tp: TensorParallel) -> int:
    return batch * CTX * 2 * cfg.num_layers * cfg.kv_size // tp.world_size * 2


def decode_us(model: Llama, batch: int) -> float:
    """A decode step of `batch` sequences at position CTX, as Generator replays it."""
    torch.cuda.empty_cache()  # the previous case's cache and graph
    runner = decode_runner(model, batch, CTX)
    runner.decode_step(batch)  # captures the bucket's graph
    graph = runner._graphs[batch][0]

    def steps():
        for _ in range(STEP_CALLS):
            graph.replay()

    return _median_us(steps, ROUNDS, STEP_CALLS)


def prefill_us(model: Llama, batch: int, seqlen: int) -> float:
    """A prefill of `batch` prompts of `seqlen` tokens (the logits of each one's last token)."""
    torch.cuda.empty_cache()
    ours, _, _ = prefill_runner(model, batch, seqlen, seed=0)  # the same prompts on every rank
    return _median_us(ours, ROUNDS // 2, 1)


class _NoAllReduce(TensorParallel):
    """The ranks without their all-reduces (the sums are wrong): a decode step's time without them."""

    def all_reduce(self, x):
        return x

    def pushes(self, x, weight):  # a pushed gemv is an all-reduce too ("auto" pushes at one row)
        return False


def decode_variants(model: Llama, batch: int) -> dict[str, float]:
    """Our step's time and, for several ranks, the steps it is compared with (see the docstring)."""
    if model.tp.world_size == 1:
        return {"ours": decode_us(model, batch)}
    tp, hidden = model.tp, model.config.hidden_size
    others = {kind: dataclasses.replace(tp, all_reduce_kind=kind) for kind in ("one_shot", "nccl")}
    times = {"ours": decode_us(model, batch)}
    ways = dict(others)
    if batch <= GEMV_MAX_ROWS:  # the pushed step exists where the batch takes gemv (else it is `ours`)
        ways["pushed"] = dataclasses.replace(tp, all_reduce_kind="pushed")
    for kind, other in ways.items():
        model.tp = other
        times[kind] = decode_us(model, batch)
    model.tp = tp
    if batch <= GEMV_MAX_ROWS:  # the folded step exists where the batch takes gemv
        model.fold_all_reduce = True
        times["folded"] = decode_us(model, batch)
        model.fold_all_reduce = False
    model.tp = _NoAllReduce(tp.rank, tp.world_size, tp.group)
    times["none"] = decode_us(model, batch)
    model.tp = tp
    times["ours_again"] = decode_us(model, batch)  # the first timed again last: the run's drift
    times["each"] = all_reduce_us(tp, batch, hidden, torch.bfloat16)
    for kind, other in others.items():
        times[f"each_{kind}"] = all_reduce_us(other, batch, hidden, torch.bfloat16)
    return times


def tp_row(op: str, shape: dict, us: float, baselines: dict[str, float], ceil: dict, nbytes: int | None = None,
           flops: int | None = None, times: dict[str, float] | None = None) -> dict:
    """A results row as run.py writes them. nbytes: what one GPU must read (its weights and KV rows:
    the floor); times: decode_variants' (the all-reduce's metrics)."""
    case = Case(op=op, family=op, shape=shape, dtype=torch.bfloat16, setup=None, bytes=nbytes, flops=flops,
                read_dominated=nbytes is not None, floor_metric=nbytes is not None)
    r = row(case, {"ours": us, **baselines}, {"ours": TIMING}, ceil)
    if times and "none" in times:
        m = r["metrics"]
        m["step_us_no_allreduce"] = round(times["none"], 1)
        if "ours_again" in times:
            m["step_us_ours_again"] = round(times["ours_again"], 1)
        m["allreduce_us_per_step"] = round(times["ours"] - times["none"], 1)
        for way in ("one_shot", "nccl", "folded", "pushed"):
            if way in times:
                m[f"step_us_{way}"] = round(times[way], 1)
                m[f"allreduce_us_per_step_{way}"] = round(times[way] - times["none"], 1)
        m["allreduce_us_each"] = round(times["each"], 2)
        for way in ("one_shot", "nccl"):
            if f"each_{way}" in times:
                m[f"allreduce_us_each_{way}"] = round(times[f"each_{way}"], 2)
    return r


def main() -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        print("perf/run_tp.py: run it under `torchrun --nproc-per-node N` with N >= 2 GPUs of one host")
        return 0
    if not TensorParallel._peer_built("gemv_push_lines"):
        # `ours` is the model's default all-reduce, the peer kernel; without it every step would
        # time the NCCL fallback under that name.
        print("perf/run_tp.py: cute_ops was built without the allreduce family (peer_all_reduce): "
              "build it (CUTE_OPS_FAMILIES unset, or naming allreduce) before timing", file=sys.stderr)
        return 2
    tp = TensorParallel.from_torchrun(world)
    import torch.distributed as dist

    lead = tp.rank == 0
    device, sha = torch.cuda.get_device_name(), commit()
    ceil = ceilings()  # each rank on its own GPU; rank 0's recorded
    if lead:
        print(f"{world} x {device} at {sha}: copy {ceil['copy_TBps']} TB/s, read {ceil['read_TBps']} TB/s, "
              f"bf16 matmul {ceil['matmul_bf16_tflops']} TFLOP/s", flush=True)
    results = []

    def record(op, shape, us, baselines, nbytes=None, flops=None, times=None):
        r = tp_row(op, shape, us, baselines, ceil, nbytes, flops, times)
        results.append(r)
        if lead:
            extra = {k: v for k, v in r["metrics"].items() if k.startswith(("step_", "allreduce", "frac_of_floor"))}
            print(f"  {op} {shape}: {us:.1f} us {baselines or ''} {extra}", flush=True)

    # LLaMA-3-8B: one GPU (rank 0; the others wait), then all of them.
    cfg = PRESETS["llama3-8b"]
    one = {}
    if lead:
        model = Llama.random(cfg)
        for b in DECODE_8B:
            one[b] = decode_us(model, b)
            record("llama_decode", {"model": "llama3-8b", "tp": 1, "B": b, "ctx": CTX}, one[b], {},
                   model.weight_bytes + _kv_bytes(cfg, b, TensorParallel()))
        del model
        torch.cuda.empty_cache()
    dist.barrier()
    model = Llama.random(cfg, tp=tp)
    for b in DECODE_8B:
        times = decode_variants(model, b)
        record("llama_decode", {"model": "llama3-8b", "tp": world, "B": b, "ctx": CTX}, times["ours"],
               {"tp1": one[b]} if lead else {}, model.weight_bytes + _kv_bytes(cfg, b, tp), times=times)
    del model
    torch.cuda.empty_cache()

    # LLaMA-3-70B over all the GPUs.
    cfg = PRESETS["llama3-70b"]
    model = Llama.random(cfg, tp=tp)
    for b in DECODE_70B:
        times = decode_variants(model, b)
        record("llama_decode", {"model": "llama3-70b", "tp": world, "B": b, "ctx": CTX}, times["ours"], {},
               model.weight_bytes + _kv_bytes(cfg, b, tp), times=times)
    batch, seqlen = PREFILL_70B
    flops = 2 * batch * seqlen * sum(p.numel() for p in model.layers.parameters())  # this GPU's share
    record("llama_prefill", {"model": "llama3-70b", "tp": world, "B": batch, "Sq": seqlen},
           prefill_us(model, batch, seqlen), {}, flops=flops)
    del model
    torch.cuda.empty_cache()

    if lead:
        doc = new_doc(device, sha, ceil, ["llama_decode", "llama_prefill"], results, gpus=world)
        doc["timing"] = TIMING
        out = RESULTS / f"{gpu_slug(device, world)}.json"
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nwrote {out}\n")
        print(table(results))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
