#!/usr/bin/env python3
"""Small odd-shaped calls of every kernel, good and bad device data alike, for compute-sanitizer:

    compute-sanitizer --tool memcheck  python3 scripts/sanitizer_cases.py
    compute-sanitizer --tool racecheck python3 scripts/sanitizer_cases.py [family ...]
    # allreduce joins ranks: each rank under the tool (the other families run on every rank too)
    torchrun --nproc-per-node 2 --no-python compute-sanitizer --tool memcheck \
        python3 scripts/sanitizer_cases.py allreduce

racecheck and gemv: the plain gemv kernel hands its partial sums over with a split named barrier
(bar.arrive, then bar.sync in another warp), which racecheck does not model, so it reports those
accesses as hazards (4 on Hopper, all in gemv_kernel.cuh's hand-over; perf/tools/racecheck_arrive.cu
shows the same on a race-free kernel). To check the rest of gemv for races, racecheck a build with
NVCC_APPEND_FLAGS=-DCUTE_OPS_GEMV_ASYNC_REDUCE=0 (the __syncthreads hand-over).

Shapes are tiny (the tools slow kernels down 10-100x) and odd (tails in every tile loop). The bad
cases run in the default "record" mode: the kernels must report them without touching memory out
of bounds, which is what memcheck checks. Prints one line per case and "sanitizer cases done".
"""
from __future__ import annotations

import sys

import torch

import cute_ops

DEV = "cuda"
BF16 = torch.bfloat16


def rand(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV).to(dtype)


def norm_cases():
    for rows, hidden in ((1, 8), (17, 136), (3, 1000), (2, 40000)):
        x, w = rand(rows, hidden), rand(hidden)
        cute_ops.rms_norm(x, w)
        cute_ops.fused_add_rms_norm(x, rand(rows, hidden), w)


def rope_cases():
    cache = cute_ops.rope_cos_sin_cache(64, 50, device=DEV)
    for tokens, rot in ((1, 64), (17, 20)):
        q, k = rand(tokens, 3, 64), rand(tokens, 1, 64)
        pos = torch.randint(0, 50, (tokens,), device=DEV)
        cute_ops.rotary_embedding(q, k, pos, cache[:, :rot].contiguous())
    pos = torch.tensor([3, -1, 49, 50, 7], device=DEV)  # two positions outside the table
    cute_ops.rotary_embedding(rand(5, 3, 64), rand(5, 1, 64), pos, cache)
    assert cute_ops.read_errors() is not None


def flash_fwd_cases():
    for b, sq, sk, hq, hk, d, causal in ((1, 1, 1, 1, 1, 64, False), (2, 17, 33, 4, 2, 96, True),
                                          (1, 130, 70, 2, 1, 128, True), (1, 65, 129, 2, 2, 256, False)):
        cute_ops.flash_fwd(rand(b, sq, hq, d), rand(b, sk, hk, d), rand(b, sk, hk, d), causal=causal)
    if torch.cuda.get_device_capability()[0] == 9:  # the sm90 kernel: tails, causal rows seeing no key, GQA
        for b, sq, sk, hq, hk, d, causal in ((1, 1, 1, 1, 1, 64, False), (2, 17, 33, 4, 2, 96, True),
                                             (1, 130, 70, 2, 1, 128, True), (1, 200, 300, 2, 2, 128, False),
                                             (1, 65, 129, 2, 2, 256, True)):
            cute_ops.flash_fwd(rand(b, sq, hq, d), rand(b, sk, hk, d), rand(b, sk, hk, d), causal=causal, arch="sm90")
        # More query tiles than SMs: each persistent CTA computes several, carrying its K/V rings, Q
        # buffers (two at D = 64 and 128; one, shared with O, at D = 256) and O stores across tiles.
        heads = 4 * -(-torch.cuda.get_device_properties(DEV).multi_processor_count // 4)  # >= SMs, GQA 4
        for d, causal in ((64, True), (128, False), (256, True), (256, False)):
            cute_ops.flash_fwd(rand(2, 200, heads, d), rand(2, 230, heads // 4, d), rand(2, 230, heads // 4, d),
                               causal=causal, arch="sm90")
    lengths_q, lengths_k = [5, 0, 17, 1], [9, 3, 0, 40]
    q, k = rand(sum(lengths_q) + 6, 4, 64), rand(sum(lengths_k), 2, 64)
    cu_q = torch.tensor([0, *lengths_q], device=DEV).cumsum(0).int() + 2  # 2 leading, 4 trailing padding rows
    cu_k = torch.tensor([0, *lengths_k], device=DEV).cumsum(0).int()
    cute_ops.flash_fwd_varlen(q, k, k.clone(), cu_q, cu_k, 17, 40, causal=True)
    bad_q = cu_q.clone()
    bad_q[-1] = q.shape[0] + 100  # past the rows of q
    cute_ops.flash_fwd_varlen(q, k, k.clone(), bad_q, cu_k, 200, 40)
    cute_ops.flash_fwd_varlen(q, k, k.clone(), cu_q, cu_k, 3, 5)  # sequences longer than the bounds
    if torch.cuda.get_device_capability()[0] == 9:  # the same through the sm90 kernel (and its checks kernel)
        qd, kd = rand(sum(lengths_q) + 6, 4, 128), rand(sum(lengths_k), 2, 128)
        cute_ops.flash_fwd_varlen(qd, kd, kd.clone(), cu_q, cu_k, 17, 40, causal=True, arch="sm90")
        qw, kw = rand(sum(lengths_q) + 6, 4, 256), rand(sum(lengths_k), 2, 256)  # head dim 256's 80-key blocks
        cute_ops.flash_fwd_varlen(qw, kw, kw.clone(), cu_q, cu_k, 17, 40, arch="sm90")
        cute_ops.flash_fwd_varlen(qd, kd, kd.clone(), bad_q, cu_k, 200, 40, arch="sm90")
        cute_ops.flash_fwd_varlen(qd, kd, kd.clone(), cu_q, cu_k, 3, 5, arch="sm90")
        # Sequences with whole 64-row groups of queries at starts that are not multiples of 64, a
        # partial last group after them (the copy-out's row bounds); O in its own buffer (head dim
        # 128) and in Q's (256).
        long_q, long_k = [70, 130, 64], [90, 130, 200]
        cu_lq = torch.tensor([0, *long_q], device=DEV).cumsum(0).int() + 2
        cu_lk = torch.tensor([0, *long_k], device=DEV).cumsum(0).int()
        for d in (128, 256):
            ql, kl = rand(sum(long_q) + 6, 4, d), rand(sum(long_k), 2, d)
            for causal in (False, True):
                cute_ops.flash_fwd_varlen(ql, kl, kl.clone(), cu_lq, cu_lk, 130, 200, causal=causal, arch="sm90")
    assert cute_ops.read_errors() is not None


def decode_cache(b, hk, d, page):
    """(k_cache, v_cache, block_table) of 70 keys a sequence: contiguous (page None) or in shuffled pages."""
    if page is None:
        return rand(b, 70, hk, d), rand(b, 70, hk, d), None
    pages = b * 5 + 1
    table = torch.randperm(pages, device=DEV)[: b * 5].view(b, 5).int()
    return rand(pages, page, hk, d), rand(pages, page, hk, d), table


def flash_decode_cases():
    for page in (None, 16):
        b, hk, d = 3, 2, 64
        kc, vc, table = decode_cache(b, hk, d, page)
        q, new = rand(b, 3, 8, d), rand(b, 3, hk, d)
        cos_sin = cute_ops.rope_cos_sin_cache(d, 60, device=DEV)
        good = torch.tensor([0, 17, 66], dtype=torch.int32, device=DEV)
        for splits in (0, 1, 5):
            cute_ops.flash_decode(q, kc, vc, good, new, new.clone(), table, num_splits=splits)
            cute_ops.flash_decode(q, kc, vc, good, block_table=table, num_splits=splits)  # no new tokens
        cute_ops.flash_decode(q, kc, vc, torch.tensor([0, 17, 50], dtype=torch.int32, device=DEV), new, new.clone(),
                              table, cos_sin[:, :32], cos_sin[:, 32:])
        for bad in ([0, -5, 3], [0, 78, 3], [0, 58, 3]):  # negative; past capacity; past the rotary table
            lengths = torch.tensor(bad, dtype=torch.int32, device=DEV)
            cute_ops.flash_decode(q, kc, vc, lengths, new, new.clone(), table, cos_sin[:, :32], cos_sin[:, 32:],
                                  num_splits=3)
            assert cute_ops.read_errors() is not None
        if table is not None:
            bad_table = table.clone()
            bad_table[1, 0] = 10_000
            cute_ops.flash_decode(q, kc, vc, good, new, new.clone(), bad_table, num_splits=2)
            assert cute_ops.read_errors() is not None
    # An fp8 cache (head dim 128, 32-key warp slabs): a page of 16 splits a slab.
    for page in (None, 16):
        b, hk, d = 3, 2, 128
        kc, vc, table = decode_cache(b, hk, d, page)
        ks, vs = cute_ops.kv_scale(kc), cute_ops.kv_scale(vc)
        kc, vc = cute_ops.quantize_kv(kc, ks), cute_ops.quantize_kv(vc, vs)
        q, new = rand(b, 3, 8, d), rand(b, 3, hk, d)
        cos_sin = cute_ops.rope_cos_sin_cache(d, 80, device=DEV)
        good = torch.tensor([0, 17, 66], dtype=torch.int32, device=DEV)
        for splits in (0, 1, 5):
            cute_ops.flash_decode(q, kc, vc, good, new, new.clone(), table, cos_sin[:, :64], cos_sin[:, 64:],
                                  num_splits=splits, k_scale=ks, v_scale=vs)
            cute_ops.flash_decode(q, kc, vc, good, block_table=table, num_splits=splits, k_scale=ks, v_scale=vs)


def gemm_pair_cases():
    for m, act in ((1, "swiglu"), (17, "gelu"), (130, "none")):
        k, inter, n1 = 72, 88, 24
        n0 = 2 * inter if act == "swiglu" else inter
        a, b0, b1 = rand(m, k), rand(n0, k) * 0.1, rand(n1, inter) * 0.1
        for kw in ({}, dict(split_k0=24, split_k1=0), dict(policy="overlap", lag=1)):
            cute_ops.gemm_pair(a, b0, b1, act, **kw)
        if torch.cuda.get_device_capability()[0] == 9:  # the sm90 kernels at each tile height
            for kw in (dict(block_m=64), dict(block_m=128), dict(block_m=256), dict(block_m=256, separate_launches=True)):
                cute_ops.gemm_pair(a, b0, b1, act, arch="sm90", **kw)
    if torch.cuda.get_device_capability()[0] == 9:  # sm90 K-splits of both GEMMs, with tails
        for m in (17, 300):  # one row block; several, the last of 44 rows
            a, b0, b1 = rand(m, 200), rand(2 * 296, 200) * 0.1, rand(40, 296) * 0.1
            for block_m in (64, 128, 256):
                cute_ops.gemm_pair(a, b0, b1, arch="sm90", block_m=block_m, split_k0=64, split_k1=128)
        # SwiGLU at 256-row tiles, two row blocks (the last of 44 rows), three full-width GEMM0
        # tiles and a partial one: the store warp's hand-off (CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP)
        # where it is built, the register stores otherwise; fused and as two launches.
        a, b0, b1 = rand(300, 72), rand(2 * 200, 72) * 0.1, rand(24, 200) * 0.1
        for separate in (False, True):
            cute_ops.gemm_pair(a, b0, b1, "swiglu", arch="sm90", block_m=256, separate_launches=separate)


def swiglu_cases():
    # Whole gate/up blocks, a partial last block, output rows that are not whole vectors, strided
    # rows; each dtype.
    for dtype in (BF16, torch.float16, torch.float32):
        for rows, inter in ((1, 64), (17, 200), (5, 4), (1000, 136)):
            cute_ops.swiglu(rand(rows, 2 * inter, dtype=dtype))
        cute_ops.swiglu(rand(33, 2 * 200 + 8, dtype=dtype)[:, :400])


def gemv_cases():
    # k: one chunk, a partial step, more steps than warps; n: below and past one unit of 16 rows;
    # SwiGLU with a partial gate/up block. (3, 4104, 4401): more units than a 132-SM device's CTA
    # slots, nearly each cut between two CTAs by stream-K (gemv_stream_k.cuh); (2, 1024, 16896):
    # whole waves of the plain kernel, 4 units a CTA (8 for SwiGLU), the warps' partials handed over
    # at every step.
    for m, k, n in ((1, 8, 17), (5, 1000, 33), (8, 1160, 130), (3, 4104, 4401), (2, 1024, 16896)):
        x, w = rand(m, k), rand(n, k) * 0.1
        cute_ops.gemv(x, w, norm_weight=rand(k), residual=rand(m, n))
        gate_up = cute_ops.pack_gate_up(rand(n, k) * 0.1, rand(n, k) * 0.1)
        cute_ops.gemv(x, gate_up, norm_weight=rand(k), activation="swiglu")


def allreduce_cases():
    # Under torchrun (2+ GPUs): one line, a CTA's 1024 lines and one past, 17 odd rows, each dtype,
    # several calls (the inbox parity flips), then pushed calls. Alone (no torchrun): skipped, said so.
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) < 2:
        print("allreduce: skipped (run under torchrun with 2+ GPUs)")
        return
    import torch.distributed as dist

    from cute_ops.models.llama.parallel import disable_multicast

    disable_multicast()
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device(DEV, rank))
    ar = cute_ops.PeerAllReduce(torch.device(DEV, rank))
    for dtype in (BF16, torch.float16, torch.float32):
        for numel in (8 // dtype.itemsize, 1024 * 8 // dtype.itemsize, 1025 * 8 // dtype.itemsize, 17 * 1000):
            for _ in range(3):
                ar(rand(numel, dtype=dtype))
    # Pushed calls (PeerAllReduce.gemv): a partial last unit (n = 1000), odd rows, a unit of one
    # line (n = 68), with and without the residual.
    for m, n, k in ((3, 1000, 520), (1, 68, 64), (8, 4096, 256)):
        for residual in (None, rand(m, n)):
            ar.gemv(rand(m, k), rand(n, k), residual)
    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()


def main():
    torch.manual_seed(0)
    chosen = sys.argv[1:]  # family names; default: all
    for name, run in (("norm", norm_cases), ("rope", rope_cases), ("flash_fwd", flash_fwd_cases),
                      ("flash_decode", flash_decode_cases), ("gemm_pair", gemm_pair_cases), ("swiglu", swiglu_cases),
                      ("gemv", gemv_cases), ("allreduce", allreduce_cases)):
        if chosen and name not in chosen:
            continue
        run()
        torch.cuda.synchronize()
        print(f"{name}: ok", flush=True)
    cute_ops.read_errors()
    print("sanitizer cases done")


if __name__ == "__main__":
    main()
