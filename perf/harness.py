"""Benchmark cases, timing and ceilings shared by the event-timed runner (run.py) and the
pytest-benchmark suite (test_bench.py)."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import torch


@dataclasses.dataclass
class Case:
    """One op at one shape. `setup` builds inputs on the GPU and returns {impl name: callable};
    the name "ours" is the cute_ops op, every other name a baseline (names as in perf/README.md).
    `impls` names every callable setup may return, so that they can be listed without a GPU; setup
    leaves out a baseline that refuses the case."""

    op: str
    family: str
    shape: dict
    dtype: torch.dtype
    setup: Callable[[], dict[str, Callable[[], object]]]
    bytes: int | None = None   # fewest bytes the op must move (read + written)
    flops: int | None = None
    impls: tuple[str, ...] = ("ours", "torch_eager", "torch_compile")
    # Implementations timed as eager back-to-back calls instead of graph replays (launch costs
    # included, as a model running without CUDA graphs pays them).
    eager: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        dims = "-".join(f"{k}{v}" for k, v in self.shape.items())
        return f"{self.op}-{dims}-{str(self.dtype).removeprefix('torch.')}"


def time_us(fn: Callable[[], object]) -> float:
    """Median time of one call in microseconds: CUDA events around each call, after warm-up, with
    L2 flushed between calls (triton.testing.do_bench). Used for the ceilings, whose buffers are
    far larger than L2."""
    from triton.testing import do_bench

    return 1e3 * do_bench(fn, warmup=25, rep=100, return_mode="median")


MIN_CALLS = 16   # calls a graph replays, at least: the graph's own launch cost spreads over them
REPLAYS = 50

TIMING = (f"CUDA-graph replay of max({MIN_CALLS}, sets) calls cycling over rotated input sets "
          "(sets x bytes >= 3 x L2, so every call starts with its inputs out of L2), median over "
          f"{REPLAYS} replays timed with CUDA events, divided by the calls; no L2 flush kernel between "
          "replays (its dirty lines would charge their write-back to the op); eager do_bench timing "
          "where capture fails")


def input_sets(case: Case) -> int:
    """How many independent input sets to rotate through so that the working set exceeds L2."""
    l2 = torch.cuda.get_device_properties().L2_cache_size
    return 1 if not case.bytes else max(1, min(64, -(-3 * l2 // case.bytes)))


def time_graph_us(graph: torch.cuda.CUDAGraph) -> float:
    """Median of REPLAYS replays of `graph`, each bracketed by CUDA events, after warm-up."""
    for _ in range(3):
        graph.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(REPLAYS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(REPLAYS)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    times = sorted(1e3 * s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def time_eager_us(fns: list[Callable[[], object]], calls: int) -> float:
    """Median over REPLAYS of `calls` back-to-back eager calls (cycling over `fns`), per call."""
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fns[i % len(fns)]()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def time_case(case: Case) -> tuple[dict[str, float], dict[str, str]]:
    """Time every implementation of `case` (ours and baselines) the same way; returns
    ({name: us per call}, {name: how it was timed})."""
    sets = [case.setup() for _ in range(input_sets(case))]
    calls = max(MIN_CALLS, len(sets))
    times, how = {}, {}
    for name in sets[0]:
        fns = [s[name] for s in sets]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (compilation, workspaces) off the capture stream
            for _ in range(2):
                for fn in fns:
                    fn()
        torch.cuda.current_stream().wait_stream(side)
        if name in case.eager:
            times[name] = time_eager_us(fns, calls)
            how[name] = f"eager, {calls} back-to-back calls over {len(fns)} sets"
            continue
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for i in range(calls):
                    fns[i % len(fns)]()
            times[name] = time_graph_us(graph) / calls
            how[name] = f"graph {calls} calls over {len(fns)} sets"
            del graph
        except RuntimeError:
            torch.cuda.synchronize()
            times[name] = time_us(fns[0])
            how[name] = "eager"
    del sets
    torch.cuda.empty_cache()
    return times, how


@functools.cache
def ceilings() -> dict:
    """The two ceilings, measured in this run: device-to-device copy (bytes read + written) and a
    bf16 8192^3 matmul through cuBLAS on random data."""
    n = 1 << 29  # 1 GiB of bf16 per buffer: far larger than L2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    copy_us = time_us(lambda: dst.copy_(src))
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_us = time_us(lambda: torch.matmul(a, b))
    del a, b
    torch.cuda.empty_cache()
    return {"copy_TBps": round(2 * n * 2 / copy_us / 1e6, 3),
            "matmul_bf16_tflops": round(2 * 8192**3 / mm_us / 1e6, 1)}


def compiled(fn: Callable) -> Callable:
    """The `torch_compile` baseline: the same math as the eager baseline, through Inductor."""
    return torch.compile(fn, fullgraph=True, dynamic=False)
