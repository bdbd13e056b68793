"""cute_ops.PeerAllReduce / torch.ops.cute_ops.peer_all_reduce (tensor parallelism: a decode step's
all-reduce as one programmatic-dependent kernel).

CPU: the op's input rules (Meta impls) and the workspace size. Two GPUs (NCCL for the
reference): sums against torch.distributed.all_reduce bit for bit (a two-rank sum is one float32
add rounded once either way) and against float64, every rank the same bits; sizes from one line to
the largest call; many calls of changing sizes, so each CTA's epoch and inbox parity must advance
in step on both ranks; calls captured in a CUDA graph and replayed with new inputs; calls with no
host sync between them while one rank is held back on the device; and a planted difference in
one rank's input, which the check must catch. Pushed calls (PeerAllReduce.gemv, one GPU and two):
bit for bit the two calls they replace, eager, unsynchronised and in a CUDA graph, and a planted
difference caught.
"""
from __future__ import annotations

import contextlib
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
    """csrc/common/peer_layout.h's layout, restated here: two inboxes of world ranks' lines, then a
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


@contextlib.contextmanager
def _rank_session(rank: int, world: int, init: str, out: str):
    """One rank's process group on its GPU (multicast off); yields the list of failures, which rank 0
    writes to `out` once every rank is through."""
    import torch.distributed as dist

    from cute_ops.models.llama.parallel import disable_multicast

    disable_multicast()
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    failures: list[str] = []
    try:
        yield failures
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            with open(out, "w") as f:
                json.dump(failures, f)
    finally:
        dist.destroy_process_group()


def _worker(rank: int, world: int, init: str, out: str, plant: bool) -> None:
    import torch.distributed as dist

    import cute_ops

    with _rank_session(rank, world, init, out) as failures:
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


# Pushed calls (PeerAllReduce.gemv): (m, n, k) of a row-parallel gemv. A decode step's o and down
# at TP=2 (8B: 4096 x 2048 and 4096 x 7168), 70B's rows (8192), odd sizes (n = 1000: a partial
# last unit; n = 68: a unit with one line; m = 3), and 8 x 4096 (8192 lines: 8 collecting CTAs).
PUSHED = [(1, 4096, 2048), (8, 4096, 7168), (3, 1000, 520), (1, 68, 64), (2, 8192, 4096), (8, 4096, 256)]


def _pushed_worker(rank: int, world: int, init: str, out: str, plant: bool) -> None:
    """PeerAllReduce.gemv against the two calls it replaces (ar(gemv(...))), bit for bit: eager over
    PUSHED in both 16-bit dtypes, with and without rank 0's residual; pushed and plain calls mixed with
    no host sync between them (their counts advance together); both captured in a CUDA graph and
    replayed with new inputs. plant: rank 1 pushes a value other than the reference's."""
    import cute_ops

    with _rank_session(rank, world, init, out) as failures:
        ar = cute_ops.PeerAllReduce(torch.device("cuda", rank))
        gen = torch.Generator(device="cuda").manual_seed(200 + rank)

        def fresh(shape, dtype, scale=1.0):
            return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)

        def operands(m, n, k, dtype, with_residual):
            x, w = fresh((m, k), dtype), fresh((n, k), dtype, k ** -0.5)
            return x, w, fresh((m, n), dtype) if with_residual and rank == 0 else None

        # gemv runs 2 CTAs an SM; a projection of at most that many 16-row units never takes stream-K
        # (gemv_stream_k_ctas), so the two calls' rows are the plain kernel's, as the pushed gemv's.
        slots = 2 * torch.cuda.get_device_properties(rank).multi_processor_count

        def check(got, want, what, n=0):
            if -(-n // 16) <= slots:
                if not torch.equal(got, want):
                    failures.append(f"{what}: {(got != want).sum().item()} of {got.numel()} elements differ "
                                    "from the two calls'")
            else:  # stream-K rows may differ from the plain kernel's in their last bit
                eps = torch.finfo(got.dtype).eps
                if not torch.allclose(got.float(), want.float(), rtol=4 * eps, atol=4 * eps * want.abs().max().item()):
                    failures.append(f"{what}: differs from the two calls' by more than stream-K's rounding")

        for dtype in (torch.bfloat16, torch.float16):
            for m, n, k in PUSHED:
                for with_residual in (False, True):
                    x, w, res = operands(m, n, k, dtype, with_residual)
                    want = ar(cute_ops.gemv(x, w, residual=res))
                    if plant and rank == 1:
                        x = x.clone()
                        x[0, 0] += 1
                    check(ar.gemv(x, w, res), want, f"eager {dtype} {m}x{n}x{k} residual={with_residual}", n)
        # Mixed calls with no host sync: a pushed call, a plain one, sizes changing.
        cases = [operands(*PUSHED[i % len(PUSHED)], torch.bfloat16, i % 2 == 0) for i in range(48)]
        results = []
        for i, (x, w, res) in enumerate(cases):
            if rank == 1 and i % 7 == 0:
                torch.cuda._sleep(200_000)  # this rank late: the other's collect waits for its lines
            results.append((ar.gemv(x, w, res), ar(cute_ops.gemv(x, w, residual=res))))
        for i, (got, want) in enumerate(results):
            check(got, want, f"unsynchronised call {i}", cases[i][1].shape[0])
        # A graph of pushed and plain calls (a decode step's pattern), replayed with new inputs.
        step = [operands(1, 4096, 2048, torch.bfloat16, True), operands(1, 4096, 7168, torch.bfloat16, False)]
        for x, w, res in step:  # warm-up
            ar.gemv(x, w, res)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [(ar.gemv(x, w, res), ar(cute_ops.gemv(x, w, residual=res))) for x, w, res in step]
        for replay in range(4):
            for x, _, res in step:
                x.copy_(fresh(x.shape, x.dtype))
                if res is not None:
                    res.copy_(fresh(res.shape, res.dtype))
            graph.replay()
            for j, (got, want) in enumerate(outs):
                check(got, want, f"replay {replay}, call {j}", 4096)


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


def _run_pushed(tmp_path, world: int, plant: bool) -> list[str]:
    from conftest import run_ranks

    init, out = f"file://{tmp_path}/rendezvous", str(tmp_path / "failures.json")
    run_ranks(_pushed_worker, world, init, out, plant)
    with open(out) as f:
        return json.load(f)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a pushed gemv of one rank needs a GPU")
def test_pushed_gemv_one_rank_matches_gemv(tmp_path):
    """One rank: the gemv's lines go to its own inbox only and the pushed call sums that one rank."""
    failures = _run_pushed(tmp_path, 1, plant=False)
    assert not failures, "\n".join(failures[:20])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an all-reduce over 2 GPUs")
def test_pushed_gemv_two_ranks_match_the_two_calls(tmp_path):
    failures = _run_pushed(tmp_path, 2, plant=False)
    assert not failures, "\n".join(failures[:20])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="an all-reduce over 2 GPUs")
def test_pushed_gemv_planted_difference_fails_the_check(tmp_path):
    failures = _run_pushed(tmp_path, 2, plant=True)
    assert any("differ from the two calls" in f for f in failures), failures[:5]


def test_gemv_push_lines_checks():
    """gemv_push_lines' rules (Meta impl): gemv's, an output peer_all_reduce takes, the workspace's."""
    ws = torch.empty(_workspace_bytes(2), dtype=torch.uint8, device="meta")
    x = torch.empty(2, 4096, dtype=torch.bfloat16, device="meta")
    w = torch.empty(1000, 4096, dtype=torch.bfloat16, device="meta")
    call = torch.ops.cute_ops.gemv_push_lines
    assert call(x, w, None, ws, [0, 0], 1).shape == (2, 1000)
    assert call(x, w, torch.empty(2, 1000, dtype=torch.bfloat16, device="meta"), ws, [0, 0], 0).shape == (2, 1000)
    with pytest.raises(ValueError, match="multiple of 4"):
        call(x, w[:998], None, ws, [0, 0], 0)
    with pytest.raises(ValueError, match="more than the 1048576"):
        call(torch.empty(8, 64, dtype=torch.bfloat16, device="meta"),
             torch.empty(65540, 64, dtype=torch.bfloat16, device="meta"), None, ws, [0, 0], 0)
    with pytest.raises(ValueError, match="at most 8"):
        call(torch.empty(9, 4096, dtype=torch.bfloat16, device="meta"), w, None, ws, [0, 0], 0)
    with pytest.raises(ValueError, match="1, 2, 4 or 8 ranks"):
        call(x, w, None, ws, [0, 0, 0], 0)
    with pytest.raises(ValueError, match="workspace must be a contiguous uint8 tensor of"):
        call(x, w, None, ws[:-4], [0, 0], 0)
    with pytest.raises(ValueError, match="residual must have shape"):
        call(x, w, torch.empty(2, 999, dtype=torch.bfloat16, device="meta"), ws, [0, 0], 0)
    torch.ops.cute_ops.peer_all_reduce(torch.empty(2, 1000, dtype=torch.bfloat16, device="meta"), ws, [0, 0], 0, True)
