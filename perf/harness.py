"""Benchmark cases, timing and ceilings shared by the event-timed runner (run.py) and the
pytest-benchmark suite (test_bench.py)."""
from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable

import torch


@dataclasses.dataclass
class Case:
    """One op at one shape. `setup` builds inputs on the GPU and returns {impl name: callable};
    the name "ours" is the cute_ops op, every other name a baseline (names as in report.py's
    BASELINES). `impls` names every callable setup may return, so that they can be listed without a
    GPU; setup leaves out a baseline that refuses the case."""

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
    # Nearly all of `bytes` is read (a KV cache, weights): the rate is then compared with the
    # read-only ceiling as well, since a copy's writes cost more than reads and a read-bound op can
    # run faster than "100% of copy".
    read_dominated: bool = False
    # `bytes` are what the op cannot avoid reading (a model step: its weights and KV rows): their
    # read at the read ceiling is its floor, and frac_of_floor reports how near it runs.
    floor_metric: bool = False
    # Calls per graph replay or eager round, when fewer than MIN_CALLS will do: a model step of
    # milliseconds has no launch cost to spread, and transformers' eager one lasts 0.1-0.3 s.
    calls: int | None = None

    @property
    def id(self) -> str:
        dims = "-".join(f"{k}{v}" for k, v in self.shape.items())
        return f"{self.op}-{dims}-{str(self.dtype).removeprefix('torch.')}"


def time_us(fn: Callable[[], object]) -> float:
    """Median time of one call in microseconds: CUDA events around each call, after warm-up, with
    L2 flushed between calls (triton.testing.do_bench). Used for the matmul ceiling and for an
    implementation that cannot be captured in a graph."""
    from triton.testing import do_bench

    return 1e3 * do_bench(fn, warmup=25, rep=100, return_mode="median")


MIN_CALLS = 16   # calls a graph replays, at least: the graph's own launch cost spreads over them
# Replays timed per implementation: as many as fill TARGET_S, within these bounds. Fifty replays of
# a 16-call graph of a 6 ms attention took 5 s per implementation; ten replays of 100 ms each still
# give a stable median, and the small shapes, whose replays last microseconds, keep all fifty.
MIN_REPLAYS, MAX_REPLAYS = 10, 50
TARGET_S = 0.5

TIMING = (f"CUDA-graph replay of max({MIN_CALLS}, sets) calls cycling over rotated input sets "
          "(sets x bytes >= 3 x L2, so every call starts with its inputs out of L2), median over "
          f"{MIN_REPLAYS}-{MAX_REPLAYS} replays (as many as fit in {TARGET_S} s) timed with CUDA events, "
          "divided by the calls; no L2 flush kernel between replays (its dirty lines would charge their "
          "write-back to the op); eager do_bench timing where capture fails")


def replays_for(replay_us: float) -> int:
    """How many replays to time, given how long one lasts."""
    return max(MIN_REPLAYS, min(MAX_REPLAYS, int(TARGET_S * 1e6 / max(replay_us, 1e-3))))


def input_sets(case: Case) -> int:
    """How many independent input sets to rotate through so that the working set exceeds L2."""
    l2 = torch.cuda.get_device_properties().L2_cache_size
    return 1 if not case.bytes else max(1, min(64, -(-3 * l2 // case.bytes)))


def time_graph_us(graph: torch.cuda.CUDAGraph, replays: int | None = None) -> tuple[float, int]:
    """Median of replays of `graph`, each bracketed by CUDA events, after warm-up; returns (us per
    replay, replays timed). The warm-up replays are timed together to size the measurement, unless
    `replays` fixes it (a graph with collectives: every rank must replay it as often)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        graph.replay()
    end.record()
    end.synchronize()
    replays = replays or replays_for(1e3 * start.elapsed_time(end) / 3)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for start, end in zip(starts, ends):
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    times = sorted(1e3 * s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2], replays


def time_eager_us(fns: list[Callable[[], object]], calls: int, replays: int | None = None) -> tuple[float, int]:
    """Median over rounds of `calls` back-to-back eager calls (cycling over `fns`), per call; the
    number of rounds is `replays`, or sized from the first round like time_graph_us. Returns
    (us per call, rounds timed)."""
    times: list[float] = []
    while replays is None or len(times) < replays:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fns[i % len(fns)]()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end) / calls)
        if replays is None:
            replays = replays_for(times[0] * calls)
    return sorted(times)[len(times) // 2], replays


def _time_impl(case: Case, name: str, fns: list[Callable[[], object]], calls: int) -> tuple[float, str]:
    """One implementation's time per call over its input sets, and how it was timed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (compilation, workspaces) off the capture stream
        for _ in range(2):
            for fn in fns:
                fn()
    torch.cuda.current_stream().wait_stream(side)
    if name in case.eager:
        us, replays = time_eager_us(fns, calls)
        return us, f"eager, {calls} back-to-back calls over {len(fns)} sets, median of {replays} rounds"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fns[i % len(fns)]()
        replay_us, replays = time_graph_us(graph)
        return replay_us / calls, f"graph {calls} calls over {len(fns)} sets, median of {replays} replays"
    except RuntimeError:
        torch.cuda.synchronize()
        return time_us(fns[0]), "eager"


def time_case(case: Case) -> tuple[dict[str, float], dict[str, str]]:
    """Time every implementation of `case` (ours and baselines) the same way; returns
    ({name: us per call}, {name: how it was timed}). A baseline that raises is left out of the
    times, with the error as its `how` and on stderr, so that one broken baseline does not cost
    the rest of a run; ours raising stops the run."""
    sets = [case.setup() for _ in range(input_sets(case))]
    calls = max(case.calls or MIN_CALLS, len(sets))
    times, how = {}, {}
    for name in sets[0]:
        try:
            times[name], how[name] = _time_impl(case, name, [s[name] for s in sets], calls)
        except Exception as e:
            if name == "ours" or name.startswith("ours_"):
                raise
            torch.cuda.synchronize()
            how[name] = f"failed: {type(e).__name__}: {e}"[:500]
            print(f"  {case.id}: {name} left out, {how[name]}", file=sys.stderr, flush=True)
    del sets
    torch.cuda.empty_cache()
    return times, how


def _stream_us(fn: Callable[[], object]) -> float:
    """One call of a kernel streaming buffers many times larger than L2: median of rounds of
    back-to-back calls with no flush between them, as the ops' graphs are timed. A flush would only
    add its own dirty lines; what a call leaves in L2 (the ends of its buffers) is evicted before
    the next call gets there."""
    fn()
    torch.cuda.synchronize()
    return time_eager_us([fn], calls=4, replays=10)[0]


def _read_kernels(buf: torch.Tensor) -> dict[str, Callable[[], object]]:
    """Kernels that read all of `buf` (float32) and write next to nothing: torch.sum, and a Triton
    kernel in a few block sizes whose programs each sum one block (16-byte loads, since each thread
    holds runs of 4 consecutive floats with no mask) and store the one value, so that the loads
    cannot be dropped. Without Triton, torch.sum alone."""
    kernels: dict[str, Callable[[], object]] = {"torch_sum": lambda: torch.sum(buf)}
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return kernels

    @triton.jit
    def block_sums(x_ptr, out_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + pid, tl.sum(tl.load(x_ptr + offs), axis=0))

    for block, warps in ((4096, 4), (8192, 8), (16384, 8)):
        sums = torch.empty(buf.numel() // block, device=buf.device, dtype=torch.float32)
        kernels[f"triton_{block}_{warps}w"] = (
            lambda sums=sums, block=block, warps=warps:
            block_sums[(sums.numel(),)](buf, sums, BLOCK=block, num_warps=warps))
    return kernels


def _copy_TBps() -> float:
    n = 1 << 29  # 1 GiB of bf16 per buffer: far larger than L2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return round(2 * n * 2 / _stream_us(lambda: dst.copy_(src)) / 1e6, 3)


def _read_TBps() -> dict[str, float]:
    elems = min(1 << 30, torch.cuda.get_device_properties().total_memory // 32)  # 4 GiB of float32
    elems -= elems % 16384  # a multiple of every block size of _read_kernels
    buf = torch.randn(elems, device="cuda", dtype=torch.float32)
    rates = {}
    for name, fn in _read_kernels(buf).items():
        try:
            rates[name] = round(elems * 4 / _stream_us(fn) / 1e6, 3)
        except Exception as e:  # a Triton that cannot build the kernel: the others still count
            print(f"read ceiling: {name} failed ({type(e).__name__}: {e}); left out", file=sys.stderr)
    return rates


def _matmul_tflops() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return round(2 * 8192**3 / time_us(lambda: torch.matmul(a, b)) / 1e6, 1)


@functools.cache
def ceilings() -> dict:
    """The ceilings, measured in this run: device-to-device copy (bytes read + written); a read of
    a buffer far larger than L2 (bytes read: the best of torch.sum and the Triton kernels, each kept
    in `read_by_kernel_TBps`), the ceiling of ops that mostly read (a KV cache, weights), since
    reads stream faster than a copy's mix of reads and writes; a bf16 8192^3 matmul through cuBLAS
    on random data."""
    copy = _copy_TBps()
    torch.cuda.empty_cache()
    read = _read_TBps()
    torch.cuda.empty_cache()
    matmul = _matmul_tflops()
    torch.cuda.empty_cache()
    return {"copy_TBps": copy, "read_TBps": max(read.values()), "matmul_bf16_tflops": matmul,
            "read_by_kernel_TBps": read}


@functools.cache
def compiled(fn: Callable) -> Callable:
    """The `torch_compile` baseline: the same math as the eager baseline, through Inductor. One
    wrapper per function for the whole process (setup runs once per input set); each shape
    compiles once. A family can have more shapes (and keyword combinations) than dynamo's default
    limit of 8 compilations a function: the gemv family's ninth and tenth cases (lm_head) lost
    their baseline to it until session 29. So the limit is raised for the benchmark process."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(fn, fullgraph=True, dynamic=False)
