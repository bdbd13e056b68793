"""gemv_push / gemv_pull (tensor parallelism: the all-reduce folded into the gemvs around it).

CPU: the ops' input rules (Meta impls). One GPU: two ranks' buffers in one process. Two GPUs
(NCCL): a push on each rank and the pull of
their sum against gemv + torch.distributed.all_reduce + gemv, bit for bit (a two-rank sum is one
float32 add rounded once either way); many steps over few slots, eager and replayed in a CUDA
graph with new inputs each replay, so the flags' counts must advance in step.
"""
from __future__ import annotations

import pytest
import torch

import cute_ops
from cute_ops._library import schemas_loaded

pytestmark = pytest.mark.skipif(not schemas_loaded(), reason="cute_ops._C is not built")

SLOTS, HIDDEN, K = 3, 1032, 264


def _exchange_bytes(slots, world, hidden, elem=2, max_rows=8, max_ctas=1024):
    """gemv_exchange.h's layout, restated to make buffers of the right and wrong sizes here."""
    inbox = -(-slots * world * max_rows * hidden * elem // 16) * 16
    return -(-(inbox + slots * world * max_ctas * 4 + slots * max_ctas * 4 + slots * 4) // 16) * 16


def test_pull_fake_shapes_and_checks():
    ex = torch.empty(_exchange_bytes(SLOTS, 2, HIDDEN), dtype=torch.uint8, device="meta")
    w = torch.empty(96, HIDDEN, dtype=torch.bfloat16, device="meta")
    nw = torch.empty(HIDDEN, dtype=torch.bfloat16, device="meta")
    out = torch.ops.cute_ops.gemv_pull(ex, 2, 1, SLOTS, 0, 5, w, nw, 1e-5, "swiglu", None)
    assert out.shape == (5, 48) and out.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="exchange has"):
        torch.ops.cute_ops.gemv_pull(ex[:-16], 2, 1, SLOTS, 0, 5, w, nw, 1e-5, "none", None)
    with pytest.raises(ValueError, match="slot must be"):
        torch.ops.cute_ops.gemv_pull(ex, 2, 1, SLOTS, SLOTS, 5, w, nw, 1e-5, "none", None)
    with pytest.raises(ValueError, match="m must be"):
        torch.ops.cute_ops.gemv_pull(ex, 2, 1, SLOTS, 0, 9, w, nw, 1e-5, "none", None)


def test_setup_ops_fake_shapes_and_checks():
    like = torch.empty(1, dtype=torch.bfloat16, device="meta")
    buf = torch.ops.cute_ops.gemv_exchange_buffer(like, SLOTS, 2, HIDDEN)
    assert buf.shape == (_exchange_bytes(SLOTS, 2, HIDDEN),) and buf.dtype == torch.uint8
    assert torch.ops.cute_ops.gemv_exchange_handle(buf).shape == (64,)
    assert torch.ops.cute_ops.gemv_exchange_open(buf, torch.zeros(64, dtype=torch.uint8)).shape == buf.shape
    with pytest.raises(ValueError, match="CUDA tensor"):
        torch.ops.cute_ops.gemv_exchange_buffer(torch.empty(1, dtype=torch.bfloat16), SLOTS, 2, HIDDEN)
    with pytest.raises(ValueError, match="multiple of 8"):
        torch.ops.cute_ops.gemv_exchange_buffer(like, SLOTS, 2, HIDDEN + 4)
    with pytest.raises(ValueError, match="64 CPU bytes"):
        torch.ops.cute_ops.gemv_exchange_open(buf, torch.zeros(63, dtype=torch.uint8))


def test_push_checks():
    ex = torch.empty(_exchange_bytes(SLOTS, 2, HIDDEN), dtype=torch.uint8, device="meta")
    x = torch.empty(3, K, dtype=torch.bfloat16, device="meta")
    w = torch.empty(HIDDEN, K, dtype=torch.bfloat16, device="meta")
    torch.ops.cute_ops.gemv_push(x, w, None, ex, [0, 0], 0, SLOTS, 1)
    with pytest.raises(ValueError, match="rank must be"):
        torch.ops.cute_ops.gemv_push(x, w, None, ex, [0, 0], 2, SLOTS, 1)
    with pytest.raises(ValueError, match="exchange has"):  # 3 ranks' layout is larger
        torch.ops.cute_ops.gemv_push(x, w, None, ex, [0, 0, 0], 0, SLOTS, 1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("m", [1, 5, 8])
def test_two_ranks_in_one_process(m):
    """Both ranks' buffers on one GPU, pushed and pulled from one stream (each push before the pulls
    that wait for it): the layout, the counts and the sums without a second GPU, over several steps
    of the same slots, against gemv's partial sums added in float32 and rounded once."""
    torch.manual_seed(m)
    dev = "cuda"

    def randn(*shape):
        return torch.randn(*shape, device=dev).to(torch.bfloat16)

    bufs = [torch.ops.cute_ops.gemv_exchange_buffer(randn(1), SLOTS, 2, HIDDEN) for _ in range(2)]
    ptrs = [b.data_ptr() for b in bufs]
    w_push = [randn(HIDDEN, K) * K ** -0.5 for _ in range(2)]  # each rank's columns of a row-parallel weight
    w_pull, norm = randn(2 * 72, HIDDEN) * HIDDEN ** -0.5, 1 + 0.1 * randn(HIDDEN)
    for step in range(2 * SLOTS + 1):
        slot, act = step % SLOTS, ("none", "swiglu")[step % 2]
        xs, residual = [randn(m, K) for _ in range(2)], randn(m, HIDDEN)
        for r in range(2):
            torch.ops.cute_ops.gemv_push(xs[r], w_push[r], residual if r == 0 else None, bufs[r], ptrs, r, SLOTS, slot)
        parts = [cute_ops.gemv(xs[0], w_push[0], residual=residual), cute_ops.gemv(xs[1], w_push[1])]
        want_sum = (parts[0].float() + parts[1].float()).to(torch.bfloat16)
        want = cute_ops.gemv(want_sum, w_pull, norm, 1e-5, activation=act)
        for r in range(2):
            kept = torch.empty(m, HIDDEN, dtype=torch.bfloat16, device=dev)
            got = torch.ops.cute_ops.gemv_pull(bufs[r], 2, r, SLOTS, slot, m, w_pull, norm, 1e-5, act, kept)
            assert torch.equal(kept, want_sum), f"step {step}, rank {r}: the pulled sum"
            assert torch.equal(got, want), f"step {step}, rank {r}: the pull's output"


def _worker(rank: int, world: int, init: str) -> None:
    import torch.distributed as dist

    from cute_ops.models.llama.parallel import disable_multicast

    disable_multicast()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    try:
        gen = torch.Generator(device="cuda").manual_seed(100 + rank)  # this rank's own partial inputs
        shared = torch.Generator(device="cuda").manual_seed(7)        # the same on every rank

        def randn(*shape, g=gen):
            return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)

        ex = cute_ops.GemvExchange(randn(1), SLOTS, HIDDEN)
        w_push = [randn(HIDDEN, K) * K ** -0.5 for _ in range(SLOTS)]
        w_pull = [randn(2 * 80, HIDDEN, g=shared) * HIDDEN ** -0.5 for _ in range(SLOTS)]
        norm = 1 + 0.1 * randn(HIDDEN, g=shared)

        def fused(xs, residual, slot, activation):
            cute_ops.gemv_push(xs, w_push[slot], ex, slot, residual if rank == 0 else None)
            kept = torch.empty(xs.shape[0], HIDDEN, dtype=xs.dtype, device="cuda")
            return cute_ops.gemv_pull(ex, slot, xs.shape[0], w_pull[slot], norm, 1e-5, activation, kept), kept

        def reference(xs, residual, slot, activation):
            part = cute_ops.gemv(xs, w_push[slot], residual=residual if rank == 0 else None)
            dist.all_reduce(part)
            return cute_ops.gemv(part, w_pull[slot], norm, 1e-5, activation=activation), part

        def check(got, want, what):
            for g, w, name in zip(got, want, ("out", "x_sum")):
                assert torch.equal(g, w), f"rank {rank}, {what}, {name}: max diff {(g.float() - w.float()).abs().max()}"

        # Eager: slots reused over steps, m and the activation varying.
        for step in range(7):
            slot, m = step % SLOTS, (1, 5, 8)[step % 3]
            act = ("none", "swiglu")[step % 2]
            xs, residual = randn(m, K), randn(m, HIDDEN, g=shared)
            check(fused(xs, residual, slot, act), reference(xs, residual, slot, act), f"eager step {step}")

        # A CUDA graph of a step's pushes and pulls over every slot, replayed with new inputs.
        m = 3
        xs = [randn(m, K) for _ in range(SLOTS)]
        residual = randn(m, HIDDEN, g=shared)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [fused(xs[s], residual, s, "swiglu") for s in range(SLOTS)]
        for replay in range(4):
            for s in range(SLOTS):
                xs[s].copy_(randn(m, K))
            residual.copy_(randn(m, HIDDEN, g=shared))
            graph.replay()
            for s in range(SLOTS):
                check(outs[s], reference(xs[s], residual, s, "swiglu"), f"replay {replay}, slot {s}")
        torch.cuda.synchronize()
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="the exchange joins ranks on 2 GPUs")
def test_two_ranks_match_nccl_all_reduce(tmp_path):
    from conftest import run_ranks

    run_ranks(_worker, 2, f"file://{tmp_path}/rendezvous")
