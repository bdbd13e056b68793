"""Benchmark cases for the LLaMA model (cute_ops.models.llama): a decode step and a prefill of the
LLaMA-3-8B shape with random bf16 weights, ours against `gptfast_compile` (perf/llama_baseline.py:
a gpt-fast-style model with a static KV cache, through torch.compile(mode="reduce-overhead",
fullgraph=True) for decode, as gpt-fast compiles it; fullgraph for prefill). Both are timed as
back-to-back calls of one step, each a CUDA graph replay (ours: Generator.decode_step; the
baseline: its cudagraph tree). Bytes of a decode step = the weights plus the K/V rows it reads;
their read at the read ceiling is the step's floor (frac_of_floor). `hf_eager` is transformers'
LlamaForCausalLM on the same weights, eager attention, run eagerly (its decode over a StaticCache
held at position ctx), where its cache fits beside the other two. `ours_fp8_cache` (a variant, not
a baseline) is our decode step over an fp8 KV cache (PagedKVCache(dtype=torch.float8_e4m3fn), scales
1.0), where it fits too."""
from __future__ import annotations

import functools

import torch

from cute_ops.models.llama import PRESETS, Generator, Llama, PagedKVCache
from cute_ops.models.llama.generate import _Sequence
from harness import Case
from llama_baseline import GptFastLlama, hf_eager_llama, hf_static_cache

MODEL = "llama3-8b"
DECODE_BATCHES = [1, 8, 32, 64]
DECODE_CTXS = [512, 4096]
PREFILLS = [(1, 4096), (8, 512)]
PAGE_SIZE = 64
STEP_CALLS = 4  # back-to-back steps per timed round (harness.Case.calls)


@functools.cache
def _model() -> Llama:
    return Llama.random(PRESETS[MODEL])


def _fresh_compiler() -> None:
    """Drop the previous case's compiled baseline and its CUDA-graph memory pools: each case
    compiles its own shapes, and what the last one held would not fit beside the next one's caches."""
    torch._dynamo.reset()
    from torch._inductor import cudagraph_trees
    cudagraph_trees.reset_cudagraph_trees()
    torch.cuda.empty_cache()


def _kv_bytes(batch: int, ctx: int) -> int:
    cfg = PRESETS[MODEL]
    return batch * ctx * 2 * cfg.num_layers * cfg.kv_size * 2


def _fits(batch: int, ctx: int, caches: int = 2) -> bool:
    """Whether `caches` KV caches of this size (ours, the gpt-fast baseline's, transformers')
    fit beside the weights (16 GB, and 12 GB of merged gate/up for the baselines) with 10% to spare."""
    try:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    except (AssertionError, RuntimeError):  # no GPU here: list every case
        return True
    return 28e9 + (caches + 0.1) * _kv_bytes(batch, ctx) < 0.9 * total


def _hf_decode_step(model, batch: int, ctx: int):
    """transformers' decode step at position ctx over a StaticCache of random contents. The cache
    counts the tokens it has stored and would move on at every call; each call first sets that
    count back to ctx (32 one-element fills, next to nothing beside the step)."""
    cache = hf_static_cache(model, batch, ctx + 16)
    idx = torch.ones(batch, 1, dtype=torch.int64, device="cuda")
    position_ids = torch.full((batch, 1), ctx, dtype=torch.int64, device="cuda")

    @torch.no_grad()
    def step():
        for layer in cache.layers:
            layer.cumulative_length.fill_(ctx)
        return model(input_ids=idx, past_key_values=cache, position_ids=position_ids, use_cache=True).logits

    return step


def decode_runner(model: Llama, batch: int, ctx: int, kv_dtype: torch.dtype = torch.bfloat16) -> Generator:
    """A Generator whose static buffers hold `batch` sequences at position ctx over a cache of
    random contents (the model's kv heads: its rank's, under tensor parallelism): each
    decode_step(batch) is then the step of the token at position ctx of each sequence."""
    cache = PagedKVCache.for_tokens(model.config, batch * (ctx + PAGE_SIZE), PAGE_SIZE, max_seq_len=ctx + PAGE_SIZE,
                                    tp=model.tp, dtype=kv_dtype)
    if cache.fp8:  # random bytes of finite e4m3 values, |x| < 32 (0x60: exponent field 12)
        cache.k.view(torch.uint8).random_(0, 0x60)
        cache.v.view(torch.uint8).random_(0, 0x60)
    else:
        cache.k.normal_()
        cache.v.normal_()
    runner = Generator(model, cache, max_batch=batch)
    running = []
    for s in range(batch):
        cache.allocator.allocate(s, ctx + 8)
        running.append(_Sequence(request=s, seq_id=s, length=ctx, last=1))
    runner._load_batch(running)
    return runner


def _decode_case(batch: int, ctx: int) -> Case:
    cfg = PRESETS[MODEL]
    weights = Llama(cfg, device="meta").weight_bytes  # what a step reads of the weights

    def setup():
        _fresh_compiler()
        model = _model()
        runner = decode_runner(model, batch, ctx)
        base = GptFastLlama(model, batch, ctx + 16)
        step = torch.compile(base, mode="reduce-overhead", fullgraph=True)
        idx = torch.ones(batch, 1, dtype=torch.int64, device="cuda")
        pos = torch.tensor([ctx], device="cuda")
        impls = {"ours": lambda: runner.decode_step(batch), "gptfast_compile": lambda: step(idx, pos)}
        if with_fp8:
            runner8 = decode_runner(model, batch, ctx, torch.float8_e4m3fn)
            impls["ours_fp8_cache"] = lambda: runner8.decode_step(batch)
        if with_hf:
            impls["hf_eager"] = _hf_decode_step(hf_eager_llama(model, base), batch, ctx)
        return impls

    with_hf = _fits(batch, ctx, caches=3)
    with_fp8 = _fits(batch, ctx, caches=3.5 if with_hf else 2.5)
    impls = (("ours", "gptfast_compile") + (("ours_fp8_cache",) if with_fp8 else ())
             + (("hf_eager",) if with_hf else ()))
    return Case(op="llama_decode", family="llama_decode", shape={"model": MODEL, "B": batch, "ctx": ctx},
                dtype=torch.bfloat16, setup=setup, bytes=weights + _kv_bytes(batch, ctx),
                impls=impls, eager=impls, read_dominated=True, floor_metric=True, calls=STEP_CALLS)


def prefill_runner(model: Llama, batch: int, seqlen: int, seed: int | None = None) -> tuple:
    """(ours, tokens, positions): ours() is the model's prefill of `batch` prompts of `seqlen`
    random tokens into a fresh paged cache (the model's kv heads: its rank's, under tensor
    parallelism), packed, with the logits of each prompt's last token; tokens [batch, seqlen] and
    positions [seqlen] are what the baselines take for the same prompts. `seed`: the same prompts on
    every rank."""
    cfg = model.config
    cache = PagedKVCache.for_tokens(cfg, batch * (seqlen + PAGE_SIZE), PAGE_SIZE, max_seq_len=seqlen + PAGE_SIZE,
                                    tp=model.tp)
    for s in range(batch):
        cache.allocator.allocate(s, seqlen)
    gen = None if seed is None else torch.Generator(device="cuda").manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seqlen), device="cuda", generator=gen)
    cu = torch.arange(0, batch + 1, dtype=torch.int32, device="cuda") * seqlen
    positions = torch.arange(seqlen, device="cuda").repeat(batch)
    slots = cache.slots(list(range(batch)), [seqlen] * batch).cuda()
    last = cu[1:] - 1
    return (lambda: model.prefill(tokens.flatten(), cu, seqlen, positions, slots, cache, last), tokens,
            torch.arange(seqlen, device="cuda"))


def _prefill_case(batch: int, seqlen: int) -> Case:
    cfg = PRESETS[MODEL]

    def setup():
        _fresh_compiler()
        model = _model()
        ours, tokens, pos = prefill_runner(model, batch, seqlen)
        base = GptFastLlama(model, batch, seqlen)
        prefill = torch.compile(base, fullgraph=True)
        hf = hf_eager_llama(model, base)
        return {"ours": ours, "gptfast_compile": lambda: prefill(tokens, pos),
                "hf_eager": torch.no_grad()(lambda: hf(input_ids=tokens, use_cache=False).logits)}

    flops = 2 * batch * seqlen * (sum(p.numel() for p in Llama(cfg, device="meta").layers.parameters()))
    impls = ("ours", "gptfast_compile", "hf_eager")
    return Case(op="llama_prefill", family="llama_prefill", shape={"model": MODEL, "B": batch, "Sq": seqlen},
                dtype=torch.bfloat16, setup=setup, flops=flops, impls=impls, eager=impls, calls=STEP_CALLS)


def decode_cases() -> list[Case]:
    return [_decode_case(b, ctx) for ctx in DECODE_CTXS for b in DECODE_BATCHES if _fits(b, ctx)]


def prefill_cases() -> list[Case]:
    return [_prefill_case(b, s) for b, s in PREFILLS]
