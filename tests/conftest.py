"""Shared test helpers.

GPU tests carry the `gpu` marker. They skip only where there is no CUDA device; on a machine with
a GPU they run, and fail (never skip) if the CUDA kernels were not built.
"""
from __future__ import annotations

import zlib

import pytest
import torch

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (this PyTorch sees none)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed(request):
    # A different, reproducible draw per test: fresh inputs, but a failure can be replayed.
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _no_device_errors(request):
    """Every GPU test starts with a clear device-error status (cute_ops.errors) and must leave it
    clear: a test that provokes bad device data reads the error itself (check_errors resets it),
    so an error found here is one that nobody expected."""
    if not HAS_GPU or "gpu" not in request.keywords:
        yield
        return
    import cute_ops

    cute_ops.read_errors()
    yield
    error = cute_ops.read_errors()
    assert error is None, f"the test left a device-side error behind: {error.message}"


# The two places an op's input rules run (common/op_checks.h): its Meta impl, for meta and fake
# tensors (every build, so CI tests it), and its CUDA impl (GPU only). Tables of bad inputs are
# parametrised over both: the same C++ rules must reject them the same way on either path.
CHECK_DEVICES = ["meta", pytest.param("cuda", marks=pytest.mark.gpu)]


def on_device(x, dev: str):
    """A meta tensor of a table of inputs as a tensor on `dev` with the same shape, strides,
    storage offset and dtype (uninitialised: only the checks look at it); anything else as is."""
    if not isinstance(x, torch.Tensor) or x.device.type != "meta" or dev == "meta":
        return x
    extent = x.storage_offset() + sum((n - 1) * st for n, st in zip(x.shape, x.stride()) if n > 0) + 1
    base = torch.empty(extent if x.numel() else 0, dtype=x.dtype, device=dev)
    return base.as_strided(x.shape, x.stride(), x.storage_offset() if x.numel() else 0)


def poison_allocator(*nbytes: int, device: str = "cuda") -> None:
    """Fill one block of the caching allocator per size with NaN and free them, so that an op's
    outputs that are allocated next, of up to these sizes, start as NaN: every element the op fails
    to write shows. The blocks are held together so that each output finds its own."""
    [torch.full(((n + 3) // 4,), float("nan"), dtype=torch.float32, device=device) for n in nbytes]


def assert_close_to_reference(out: torch.Tensor, expected: torch.Tensor, lowp: torch.Tensor, *, k: float = 2.0,
                               what: str = "out") -> None:
    """Our output against a float64 reference, with the error bounded by PyTorch's own error on the
    same math in the working dtype (as flash-attn's tests do): ``max|out - expected|`` may be at most
    ``k`` times ``max|lowp - expected|``, plus half an ulp of the output dtype at the largest
    ``|expected|`` (one rounding of the output, so that an exactly rounded result always passes).

    An absolute tolerance cannot do this: attention outputs over a thousand keys are ~0.03, so a
    bf16 atol of 2e-2 would pass a wrong V page. This bound scales with the problem; the tests that
    call it state their k, and each family has a planted-bug test showing the bound fails a small
    bug (one wrong 16-key group, one skipped element)."""
    assert out.shape == expected.shape == lowp.shape, (out.shape, expected.shape, lowp.shape)
    if out.numel() == 0:
        return
    assert not out.isnan().any(), f"{what}: NaN in our output (unwritten, poisoned elements?)"
    expected = expected.double()
    err = (out.double() - expected).abs().max().item()
    base = (lowp.double() - expected).abs().max().item()
    floor = 0.5 * torch.finfo(out.dtype).eps * expected.abs().max().item()
    bound = k * base + floor
    assert err <= bound, (f"{what}: max error {err:.3g} against the float64 reference exceeds {k} x PyTorch's own "
                          f"{lowp.dtype} error ({base:.3g}) + half an ulp ({floor:.3g}) = {bound:.3g}")


def decode_lengths(batch: int, capacity: int, device: str = "cuda") -> torch.Tensor:
    """int32 cache lengths for flash_decode tests: 1, an odd length, the capacity, then random ones."""
    fixed = [1, 77, capacity][:batch]
    rest = torch.randint(1, capacity + 1, (max(0, batch - 3),)).tolist()
    return torch.tensor(fixed + rest, dtype=torch.int32, device=device)


def tolerances(dtype: torch.dtype) -> dict:
    """Output compared with a float64 reference: one or two rounding steps of the output dtype plus
    float32 accumulation."""
    return {torch.float32: dict(rtol=1e-5, atol=1e-5),
            torch.float16: dict(rtol=2e-3, atol=2e-3),
            torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}[dtype]


def capture_graph(fn) -> torch.cuda.CUDAGraph:
    """Run `fn` once on a side stream (capture needs warmed-up allocations and code off the
    capturing stream), then capture one call of it in a CUDA graph and return the graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def gpu_kernel_names(call) -> list[str]:
    """The names of the GPU kernels `call()` launches (torch.profiler), after one call outside the
    profile (a first call may also build and upload tables, or set kernel attributes)."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and "emcpy" not in e.name and "emset" not in e.name})


def run_ranks(target, world: int, *args, timeout: float = 300) -> None:
    """target(rank, world, *args) in `world` spawned processes (one a GPU rank); fails unless every
    one exits 0 within `timeout` seconds (a rank's traceback is on stderr), killing any left."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, world, *args)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * world, "a rank failed (its traceback is on stderr)"
