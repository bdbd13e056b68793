"""cute_ops.PeerAllReduce / torch.ops.cute_ops.peer_all_reduce (tensor parallelism: a decode step's
all-reduce as one programmatic-dependent kernel).

CPU: the op's input rules (Meta impls) and the workspace size. Two GPUs (NCCL for the
reference): sums against torch.distributed.all_reduce bit for bit (a two-rank sum is one float32
add rounded once either way) and against float64, every rank the same bits; sizes from one line to
the largest call; many calls of changing sizes, so each CTA's epoch and inbox parity must advance
in step on both ranks; calls captured in a CUDA graph and replayed with new inputs; calls with no
host sync between them while one rank is held back on the device; and a planted difference in
one rank's input, which the check must catch.
"""
from __future__ import annotations

import json

import pytest
import torch

from cute_ops._library import schemas_loaded

pytestmark = pytest.mark.skipif(not schemas_loaded(), reason="cute_ops._C is not built")

# (rows, cols), lines of bf16: one line (1 x 4), one CTA's 1024 (1 x 4096), odd row counts (17 x
# 1000: 4250, a partial fifth CTA; 3 x 2728: 2 short of two CTAs), a decode step's rows of the 8B
# and 70B models, one line past four CTAs (4097 x 4), and the largest call (64 x 8192, 1 MiB).
SHAPES = [(1, 4), (1, 4096), (17, 1000), (3, 2728), (8, 4096), (1, 8192), (4097, 4), (64, 8192)]


def _workspace_bytes(world, max_lines=(1 << 20) // 8, line=16, max_ctas=128):
    """peer_all_reduce_layout.h's layout, restated here: two inboxes of world ranks' lines, then a
    uint32 count per CTA."""
    return 2 * world * max_lines * line + max_ctas * 4


def test_workspace_bytes_and_max_bytes():
    for world in (1, 2, 4, 8):
        assert torch.ops.cute_ops.peer_all_reduce_workspace_bytes(world) == _workspace_bytes(world)
    assert torch.ops.cute_ops.peer_all_reduce_max_bytes() == 64 * 8192 * 2


def test_checks():
    ws = torch.empty(_workspace_bytes(2), dtype=torch.uint8, device="meta")
    x = torch.empty(8, 4096, dtype=torch.bfloat16, device="meta")
    torch.ops.cute_ops.peer_all_reduce(x, ws, [0, 0], 1)  # fine: checks only on meta
    call = torch.ops.cute_ops.peer_all_reduce
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        call(torch.ones(4, dtype=torch.bfloat16), torch.zeros(_workspace_bytes(2), dtype=torch.uint8), [0, 0], 0)
    with pytest.raises(ValueError, match="x must be contiguous"):
        call(x[:, :4088], ws, [0, 0], 0)
    with pytest.raises(ValueError, match="multiple of 8 bytes"):
        call(x.view(-1)[:3], ws, [0, 0], 0)
    with pytest.raises(ValueError, match="more than the 1048576"):
        call(torch.empty(65, 8192, dtype=torch.bfloat16, device="meta"), ws, [0, 0], 0)
    with pytest.raises(ValueError, match="1, 2, 4 or 8 ranks"):
        call(x, ws, [0, 0, 0], 0)
    with pytest.raises(ValueError, match="rank must be in"):
        call(x, ws, [0, 0], 2)
    with pytest.raises(ValueError, match="workspace must be a contiguous uint8 tensor of"):
        call(x, ws[:-4], [0, 0], 0)
    with pytest.raises(TypeError, match="x must have dtype in"):
        call(x.to(torch.int32), ws, [0, 0], 0)


def _worker(rank: int, world: int, init: str, out: str, plant: bool) -> None:
    import torch.distributed as dist

    import cute_ops
    from cute_ops.models.llama.parallel import disable_multicast

    disable_multicast()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    failures: list[str] = []
    try:
        ar = cute_ops.PeerAllReduce(torch.device("cuda", rank))
        gen = torch.Generator(device="cuda").manual_seed(100 + rank)  # each rank its own values

        def fresh(shape, dtype):
            return (torch.randn(*shape, generator=gen, device="cuda") * 3).to(dtype)

        def check(got, x, what):
            """got: our sum of every rank's x; against NCCL's (bit for bit) and float64's bound."""
            want = x.clone()
            dist.all_reduce(want)
            exact = x.double()
            dist.all_reduce(exact)
            # every rank the same bits
            mine = got.flatten().view(torch.uint8)
            everyone = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(everyone, mine)
            if not all(torch.equal(e, mine) for e in everyone):
                failures.append(f"{what}: the ranks' sums differ")
            if not torch.equal(got, want):
                bad = (got != want).sum().item()
                failures.append(f"{what}: {bad} of {got.numel()} elements differ from NCCL's")
            ulp = torch.finfo(x.dtype).eps
            err = (got.double() - exact).abs() / exact.abs().clamp_min(1e-3)
            if err.max().item() > ulp:
                failures.append(f"{what}: relative error {err.max().item():.3g} > one rounding ({ulp})")

        # Eager: every shape and dtype, in an order that changes each CTA's grid from call to call.
        calls = 0
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            for rows, cols in SHAPES:
                if rows * cols * dtype.itemsize > ar.max_bytes:
                    continue
                x = fresh((rows, cols), dtype)
                if plant and rank == 1:  # this rank sums a value other than the one checked
                    y = x.clone()
                    y.view(-1)[0] += 1
                    ar(y)
                    got = y
                else:
                    got = ar(x.clone())
                check(got, x, f"eager {dtype} {rows}x{cols}")
                calls += 1
        # Many small calls of changing sizes: epochs and parities over hundreds of uses.
        for i in range(300):
            rows = (1, 8, 3, 64)[i % 4]
            x = fresh((rows, 4096), torch.bfloat16)
            check(ar(x.clone()), x, f"call {i}, {rows} rows")
        # A CUDA graph of a step's worth of calls (sizes alternating), replayed with new inputs,
        # then eager calls again (the counts go on from the replays).
        xs = [fresh((r, 4096), torch.bfloat16) for r in (1, 8, 1, 32, 1)]
        work = [x.clone() for x in xs]
        for w in work:  # warm-up
            ar(w)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for w in work:
                ar(w)
        for replay in range(5):
            for x, w in zip(xs, work):
                x.copy_(fresh(x.shape, x.dtype))
                w.copy_(x)
            graph.replay()
            for j, (x, w) in enumerate(zip(xs, work)):
                check(w, x, f"replay {replay}, call {j}")
        x = fresh((8, 4096), torch.bfloat16)
        check(ar(x.clone()), x, "eager after the replays")
        # Calls back to back with no host sync between them, rank 1 held back on the device before
        # every seventh (the other rank waits in its call for that one's lines), every result kept
        # and checked at the end.
        inputs = [fresh(((1, 8, 3, 64)[i % 4], 4096), torch.bfloat16) for i in range(64)]
        results = [x.clone() for x in inputs]
        for i, y in enumerate(results):
            if rank == 1 and i % 7 == 0:
                torch.cuda._sleep(200_000)  # some 100 us of spinning on the device
            ar(y)
        for i, (x, y) in enumerate(zip(inputs, results)):
            check(y, x, f"unsynchronised call {i}")
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(failures, f)
    finally:
        dist.destroy_process_group()


def _run(tmp_path, plant: bool) -> list[str]:
    from conftest import run_ranks

    init, out = f"file://{tmp_path}/rendezvous", str(tmp_path / "failures.json")
    run_ranks(_worker, 2, init, out, plant)
    with open(out) as f:
        return json.load(f)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an all-reduce over 2 GPUs")
def test_two_ranks_match_nccl_all_reduce(tmp_path):
    failures = _run(tmp_path, plant=False)
    assert not failures, "\n".join(failures[:20])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an all-reduce over 2 GPUs")
def test_planted_difference_fails_the_check(tmp_path):
    failures = _run(tmp_path, plant=True)
    assert any("differ from NCCL's" in f for f in failures), failures[:5]
