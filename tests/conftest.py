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


def poison_allocator(*nbytes: int, device: str = "cuda") -> None:
    """Fill one block of the caching allocator per size with NaN and free them, so that an op's
    outputs that are allocated next, of up to these sizes, start as NaN: every element the op fails
    to write shows. The blocks are held together so that each output finds its own."""
    [torch.full(((n + 3) // 4,), float("nan"), dtype=torch.float32, device=device) for n in nbytes]


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
