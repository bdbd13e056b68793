"""How fast can a one-row projection stream its weights? Three rates (TB/s of weight bytes) at the
LLaMA model's projection shapes, each graph-replayed over enough weight copies to exceed L2:

- `cublas`: `F.linear` (what cuBLAS picks at M = 1, named with its launch shape);
- `tiles_read`: a read of W in 16-row x C-column tiles, one small program a tile, no math: does the
  projection's access pattern (16 rows, a short segment of each) read slower than a contiguous
  stream? (The read ceiling is harness.py's contiguous read.)
- `tile_gemv`: a split-K gemv with no shared memory and no ring: one small program a BR x C tile of
  W, the dot with x's C columns in registers (fp32 FMAs), an fp32 atomic add into the output
  (zeroed first, in the timing). Not deterministic and no epilogue: a bound on what a design of
  many short CTAs and plain loads streams at, for comparison with `cute_ops.gemv`'s persistent
  ring-fed kernel (perf/run.py's gemv rows; docs/perf-notes.md, session 50).
- `tile_gemv_det`: tile_gemv 16x512 with a deterministic hand-over in place of the atomic add (the
  tile's sums stored, a counted arrival, the unit's last tile sums the tiles in k order), as
  csrc/gemv/gemv_tiles.cuh does: what that hand-over costs a design of short CTAs (session 51).
- `tile_gemv_2pass`: the same tiles with no hand-over: each stores its sums and ends, and a second
  launch adds each row's k tiles in order (deterministic; both launches timed).

    python perf/tools/gemv_tile_probe.py [--shapes gate_up70B_tp2,lm_head8B]
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # perf/: the harness

# (K, N) of W [N, K]: the 8B's projections, and the 70B's at TP=2 (each rank's half).
SHAPES = {
    "qkv8B": (4096, 6144), "o8B": (4096, 4096), "gate_up8B": (4096, 28672), "down8B": (14336, 4096),
    "lm_head8B": (4096, 128256), "qkv70B_tp2": (8192, 5120), "o70B_tp2": (4096, 8192),
    "gate_up70B_tp2": (8192, 28672), "down70B_tp2": (14336, 8192), "lm_head70B_tp2": (8192, 64128),
}


def kernels():
    """The two Triton kernels (Triton comes with a GPU PyTorch; imported here so that the module
    loads on a CPU machine)."""
    import triton
    import triton.language as tl

    @triton.jit
    def tiles_read(w, out, K, C: tl.constexpr):
        pid = tl.program_id(0)
        nk = K // C
        r = (pid // nk).to(tl.int64) * 16 + tl.arange(0, 16)[:, None]
        k = (pid % nk) * C + tl.arange(0, C)[None, :]
        tl.store(out + pid, tl.sum(tl.load(w + r * K + k).to(tl.float32)))

    @triton.jit
    def tile_gemv(w, x, out, K, BR: tl.constexpr, C: tl.constexpr):
        pid = tl.program_id(0)
        nk = K // C
        r = (pid // nk).to(tl.int64) * BR + tl.arange(0, BR)
        k = (pid % nk) * C + tl.arange(0, C)
        t = tl.load(w + r[:, None] * K + k[None, :]).to(tl.float32)
        xv = tl.load(x + k).to(tl.float32)
        tl.atomic_add(out + r, tl.sum(t * xv[None, :], axis=1), sem="relaxed")

    @triton.jit
    def tile_gemv_det(w, x, out, parts, counters, K, BR: tl.constexpr, C: tl.constexpr):
        # tile_gemv with a deterministic hand-over instead of the atomic add: the tile's sums
        # stored, a barrier, a counted arrival (acq_rel, a returned value); the unit's last tile sums
        # the stored tiles in k order and writes the output, then zeroes the counter.
        pid = tl.program_id(0)
        nk = K // C
        unit = pid // nk
        kt = pid % nk
        r = unit.to(tl.int64) * BR + tl.arange(0, BR)
        k = kt * C + tl.arange(0, C)
        t = tl.load(w + r[:, None] * K + k[None, :]).to(tl.float32)
        xv = tl.load(x + k).to(tl.float32)
        tl.store(parts + (unit.to(tl.int64) * nk + kt) * BR + tl.arange(0, BR), tl.sum(t * xv[None, :], axis=1))
        tl.debug_barrier()
        if tl.atomic_add(counters + unit, 1, sem="acq_rel") == nk - 1:
            total = tl.zeros([BR], dtype=tl.float32)
            for j in range(0, nk):
                total += tl.load(parts + (unit.to(tl.int64) * nk + j) * BR + tl.arange(0, BR), cache_modifier=".cg")
            tl.store(out + r, total)
            tl.atomic_xchg(counters + unit, 0, sem="relaxed")

    @triton.jit
    def tile_gemv_parts(w, x, parts, N, K, BR: tl.constexpr, C: tl.constexpr):
        # tile_gemv's tiles with no hand-over at all: each stores its sums into parts[kt, rows]
        # and ends; sum_parts adds them up in a second launch.
        pid = tl.program_id(0)
        nk = K // C
        r = (pid // nk).to(tl.int64) * BR + tl.arange(0, BR)
        k = (pid % nk) * C + tl.arange(0, C)
        t = tl.load(w + r[:, None] * K + k[None, :]).to(tl.float32)
        xv = tl.load(x + k).to(tl.float32)
        tl.store(parts + (pid % nk).to(tl.int64) * N + r, tl.sum(t * xv[None, :], axis=1))

    @triton.jit
    def sum_parts(parts, out, N, NK, B: tl.constexpr):
        r = tl.program_id(0).to(tl.int64) * B + tl.arange(0, B)
        total = tl.zeros([B], dtype=tl.float32)
        for j in range(0, NK):  # in k order: deterministic
            total += tl.load(parts + j * N + r, mask=r < N)
        tl.store(out + r, total, mask=r < N)

    return tiles_read, tile_gemv, tile_gemv_det, tile_gemv_parts, sum_parts


def graph_us(fn, calls: int) -> float:
    """One call's time: `fn` (which makes `calls` calls) captured once, replays timed by the
    harness (median of its replays, as perf/run.py times)."""
    from harness import time_graph_us

    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return time_graph_us(g)[0] / calls


def cublas_kernels(x: torch.Tensor, w: torch.Tensor) -> str:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        F.linear(x, w)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        events = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
    return " + ".join(f"{e['name'].split('(')[0][:48]} grid {e['args'].get('grid')} block {e['args'].get('block')}"
                      for e in events)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated names of " + ", ".join(SHAPES))
    args = ap.parse_args(argv)
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("gemv_tile_probe.py: no GPU here; it times kernels on one")
        return 0
    tiles_read, tile_gemv, tile_gemv_det, tile_gemv_parts, sum_parts = kernels()
    print(f"{torch.cuda.get_device_name()}: TB/s of weight bytes, M = 1")
    print("| shape | cublas | tiles_read C=512 | tile_gemv 16x512 | tile_gemv 32x512 | tile_gemv 64x256 "
          "| tile_gemv_det 16x512 | tile_gemv_2pass 16x512 | cuBLAS's kernels |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        copies = max(2, (4 << 30) // (k * n * 2))  # 4 GiB of weights: far beyond L2
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        x = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        out = torch.zeros(n, device="cuda")
        sums = torch.empty(n // 16 * (k // 512), device="cuda")
        rate = lambda us: k * n * 2 / us / 1e6  # noqa: E731
        row = [rate(graph_us(lambda: [F.linear(x[None], w) for w in ws], copies)),
               rate(graph_us(lambda: [tiles_read[(n // 16 * (k // 512),)](w, sums, k, C=512, num_warps=4)
                                      for w in ws], copies))]
        ref = ws[0].double() @ x.double()
        for br, c, warps in ((16, 512, 4), (32, 512, 4), (64, 256, 4)):
            grid = (n // br * (k // c),)

            def call(w):
                out.zero_()
                tile_gemv[grid](w, x, out, k, BR=br, C=c, num_warps=warps)
            row.append(rate(graph_us(lambda: [call(w) for w in ws], copies)))
            call(ws[0])
            err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
            if err > 1e-4:  # fp32 sums of bf16 products: ~1e-7 relative; a wrong tile is O(1)
                sys.exit(f"{name}: tile_gemv {br}x{c} is wrong (max error {err:.1e} of the largest output)")
        parts = torch.empty(n * (k // 512), device="cuda")
        counters = torch.zeros(n // 16, dtype=torch.int32, device="cuda")
        det = lambda w: tile_gemv_det[(n // 16 * (k // 512),)](w, x, out, parts, counters, k, BR=16, C=512,  # noqa: E731
                                                               num_warps=4)
        row.append(rate(graph_us(lambda: [det(w) for w in ws], copies)))
        out.fill_(float("nan"))
        det(ws[0])
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        if not err <= 1e-4:
            sys.exit(f"{name}: tile_gemv_det is wrong (max error {err:.1e} of the largest output)")
        two_parts = torch.empty(k // 512 * n, device="cuda")

        def two_pass(w):
            tile_gemv_parts[(n // 16 * (k // 512),)](w, x, two_parts, n, k, BR=16, C=512, num_warps=4)
            sum_parts[(-(-n // 256),)](two_parts, out, n, k // 512, B=256, num_warps=4)
        row.append(rate(graph_us(lambda: [two_pass(w) for w in ws], copies)))
        out.fill_(float("nan"))
        two_pass(ws[0])
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        if not err <= 1e-4:
            sys.exit(f"{name}: tile_gemv_2pass is wrong (max error {err:.1e} of the largest output)")
        print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in row) + f" | {cublas_kernels(x[None], ws[0])} |",
              flush=True)
        del ws
    return 0


if __name__ == "__main__":
    sys.exit(main())
