"""Run a LLaMA model: `python -m cute_ops.models.llama --preset llama3-8b --random-weights --batch 1
--prompt-len 512 --new-tokens 128` times prefill and decode with random weights; `--checkpoint DIR`
runs a HF checkpoint (text in and out when the directory has a tokenizer). Over N GPUs of one host:
`torchrun --nproc-per-node N -m cute_ops.models.llama --tp N ...` (tensor parallelism: each rank
loads and runs its part of the model; rank 0 prints)."""
from __future__ import annotations

import argparse
import pathlib
import time

import torch

from . import PRESETS, Generator, Llama, PagedKVCache, SamplingParams, load_checkpoint
from .parallel import TensorParallel
from .weights import HostMemoryPeak


def copy_ceiling_tbs(device) -> float:
    """The device's copy rate (TB/s, read + write) over 1 GiB buffers: the floor decode is held to."""
    a = torch.empty(1 << 29, dtype=torch.int16, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    return 10 * 2 * a.numel() * a.element_size() / (start.elapsed_time(end) * 1e-3) / 1e12


def all_reduce_us(tp: TensorParallel, rows: int, hidden: int, dtype: torch.dtype, calls: int = 64) -> float:
    """One all-reduce of a [rows, hidden] tensor (a layer's o or down output), as a decode step's
    graph runs it: `calls` back to back in a CUDA graph, median of 10 replays, per call."""
    x = torch.randn(rows, hidden, dtype=dtype, device="cuda")
    for _ in range(3):
        tp.all_reduce(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            tp.all_reduce(x)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def _largest(tp: TensorParallel, value: float) -> float:
    """The largest of every rank's value."""
    if tp.world_size == 1:
        return value
    import torch.distributed as dist

    everyone = [None] * tp.world_size
    dist.all_gather_object(everyone, value, group=tp.group)
    return max(everyone)


def _timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--preset", choices=sorted(PRESETS))
    src.add_argument("--checkpoint", type=pathlib.Path, help="a HF checkpoint directory")
    ap.add_argument("--random-weights", action="store_true", help="with --preset: random weights")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=512, help="random prompts of this length (no --prompt)")
    ap.add_argument("--prompt", action="append", help="a text prompt (needs a tokenizer); repeatable")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    ap.add_argument("--kv-cache", choices=("model", "fp8"), default="model",
                    help="the KV cache's dtype: the model's, or float8_e4m3fn (head_dim 128; scales 1.0)")
    ap.add_argument("--no-graphs", action="store_true", help="decode eagerly instead of replaying CUDA graphs")
    ap.add_argument("--batch-invariant", action="store_true",
                    help="each sequence's logits the same bits whatever it is batched with, so greedy tokens equal "
                         "each prompt's alone (up to 8 prompts, one GPU; slower)")
    ap.add_argument("--tp", type=int, default=1,
                    help="tensor parallelism over this many GPUs (launch with torchrun --nproc-per-node N)")
    args = ap.parse_args(argv)
    if args.preset and not args.random_weights:
        ap.error("--preset needs --random-weights (or use --checkpoint DIR)")
    dtype = getattr(torch, args.dtype)
    try:
        tp = TensorParallel.from_torchrun(args.tp)
    except ValueError as e:
        ap.error(str(e))
    show = print if tp.rank == 0 else (lambda *a, **k: None)

    tokenizer = None
    with HostMemoryPeak() as host:
        if args.checkpoint:
            model = load_checkpoint(args.checkpoint, dtype=dtype, tp=tp)
        else:
            model = Llama.random(PRESETS[args.preset], dtype=dtype, tp=tp)
    host_gb = _largest(tp, (host.added or 0) / 1e9)
    if args.checkpoint and any((args.checkpoint / f).exists() for f in ("tokenizer.json", "tokenizer.model")):
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(str(args.checkpoint))
    cfg = model.config
    if args.prompt:
        if tokenizer is None:
            ap.error("--prompt needs a checkpoint directory with a tokenizer")
        prompts = [tokenizer(p)["input_ids"] for p in args.prompt]
    else:
        gen = torch.Generator().manual_seed(0)
        prompts = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt_len), generator=gen).tolist()
    longest = max(len(p) for p in prompts) + args.new_tokens
    cache = PagedKVCache.for_tokens(cfg, len(prompts) * (longest + args.page_size), args.page_size,
                                    max_seq_len=longest, dtype=torch.float8_e4m3fn if args.kv_cache == "fp8" else dtype,
                                    tp=tp)
    try:
        runner = Generator(model, cache, max_batch=len(prompts), cuda_graphs=not args.no_graphs,
                           batch_invariant=args.batch_invariant)
    except ValueError as e:
        ap.error(str(e))
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, seed=0)
    stop = None if tokenizer else ()  # random weights: run every step

    runner.generate(prompts, 2, sampling, stop)  # warm-up: kernels, tables, the batch's graph
    _, t_prefill = _timed(lambda: runner.generate(prompts, 1, sampling, stop))
    outputs, t_total = _timed(lambda: runner.generate(prompts, args.new_tokens, sampling, stop,
                                                      progress=True))
    steps = max(len(o) for o in outputs) - 1
    step_s = (t_total - t_prefill) / max(steps, 1)
    ceiling = copy_ceiling_tbs(cache.k.device)
    kv_bytes = sum(len(p) + args.new_tokens / 2 for p in prompts) * 2 * cfg.num_layers * cfg.kv_size * \
        cache.k.element_size() / tp.world_size
    floor_s = (model.weight_bytes + kv_bytes) / (ceiling * 1e12)
    n_prompt = sum(len(p) for p in prompts)
    per_gpu = f" per GPU, tensor-parallel over {tp.world_size} GPUs" if tp.world_size > 1 else ""
    show(f"{torch.cuda.get_device_name()}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, "
         f"{model.weight_bytes / 1e9:.2f} GB of weights{per_gpu}, batch {len(prompts)}, {args.dtype}; "
         f"loading added at most {host_gb:.2f} GB of private host memory on any rank")
    show(f"prefill: {n_prompt} tokens in {t_prefill * 1e3:.1f} ms ({n_prompt / t_prefill:,.0f} tokens/s)")
    show(f"decode:  {step_s * 1e3:.3f} ms/step over {steps} steps, {len(prompts) / step_s:,.1f} tokens/s, "
         f"weights at {model.weight_bytes / step_s / 1e12:.2f} TB/s{' per GPU' if per_gpu else ''}; "
         f"{floor_s / step_s:.0%} of the floor {floor_s * 1e3:.2f} ms (weights + KV at the {ceiling:.2f} TB/s "
         f"copy ceiling)")
    if tp.world_size > 1:
        ar = all_reduce_us(tp, len(prompts), cfg.hidden_size, dtype)
        show(f"all-reduce: {ar:.1f} us each, alone in a graph; {2 * cfg.num_layers} a step: "
             f"{2 * cfg.num_layers * ar / 1e3:.3f} ms of the step")
    if tokenizer:
        for p, o in zip(args.prompt, outputs):
            show(f"\n>>> {p}\n{tokenizer.decode(o, skip_special_tokens=True)}")
    if tp.world_size > 1:
        import torch.distributed as dist

        del runner  # its CUDA graphs hold NCCL work: release them before the process group
        torch.cuda.synchronize()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
