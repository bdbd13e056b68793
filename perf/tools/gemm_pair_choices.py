#!/usr/bin/env python3
"""gemm_pair's automatic choices for the MLP at given M, timed against the ones it could have
made: each kernel kind forced at each of its tile heights, with --splits K-splits of either GEMM,
and at decode sizes (M <= 8) the two gemv launches that fused_mlp runs there (`gemv_pair`). The
best baseline of the same MLP (the cuBLAS graph and torch.compile, as perf/cases_gemm_pair.py
builds them) is timed in the same run, the harness's way. For the choices the op makes per device
(the kernel kind at small M in gemm_pair_op.cpp, the tile height, the automatic splits in
tile_order.h): one run on each GPU says where a choice is not the fastest.

    python perf/tools/gemm_pair_choices.py 1 2 4 8 16 32 64     # kinds and tile heights
    python perf/tools/gemm_pair_choices.py --splits 1 16 64     # and K-splits (slower)

Prints, per M, every variant's time and its ratio to the best baseline, fastest first.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

# K-splits tried with --splits: GEMM0 columns (multiples of 64, whole sm90 K tiles) and GEMM1 h
# columns (multiples of 64, the h columns of one GEMM0 tile), for the LLaMA-3-8B MLP.
SPLITS_K0 = (512, 1024, 2048)
SPLITS_K1 = (896, 1792, 3584)


def variants(by_arch: dict, splits: bool) -> dict[str, dict]:
    """{name: gemm_pair keyword arguments}: the op's own choice ("ours"), each kind at each tile
    height it has (`by_arch`: the extension's sets, supported_configs()["gemm_pair"]["by_arch"]
    from cute_ops._library), and with `splits` each kind at its default height with each K-split
    of one GEMM."""
    out: dict[str, dict] = {"ours": {}}
    for arch, sets in sorted(by_arch.items()):
        heights = sets["block_m"]
        for block_m in heights:
            out[f"ours_{arch}_m{block_m}"] = {"arch": arch, "block_m": block_m}
        if splits:
            for k0 in SPLITS_K0:
                out[f"ours_{arch}_k0_{k0}"] = {"arch": arch, "split_k0": k0}
            for k1 in SPLITS_K1:
                out[f"ours_{arch}_k1_{k1}"] = {"arch": arch, "split_k1": k1}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("m", type=int, nargs="*", default=[1, 16, 64, 128], help="rows (tokens)")
    ap.add_argument("--splits", action="store_true", help="also time K-splits of either GEMM")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="time only these variants (and the baselines)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("gemm_pair_choices: needs a CUDA GPU and cute_ops built with its kernels")
        return 0
    import cases_gemm_pair as mlp
    import cute_ops
    from cute_ops.gemv import MAX_ROWS as GEMV_MAX_ROWS
    from harness import Case, time_case

    chosen = variants(cute_ops._library.supported_configs()["gemm_pair"]["by_arch"], args.splits)
    if args.only:
        unknown = sorted(set(args.only) - set(chosen))
        if unknown:
            ap.error(f"--only: no variant named {', '.join(unknown)}; these exist: {', '.join(chosen)}")
        chosen = {name: kw for name, kw in chosen.items() if name in args.only}
    if torch.cuda.get_device_capability()[0] != 9:  # the sm90 kernels run on 9.x only
        chosen = {name: kw for name, kw in chosen.items() if kw.get("arch") != "sm90"}
    for m in args.m:
        def setup(m=m):
            x, w_gate_up, packed, w_down = mlp.mlp_inputs(m)
            compiled = mlp._compiled_mlp()
            impls = {name: (lambda kw=kw: cute_ops.gemm_pair(x, packed, w_down, **kw)) for name, kw in chosen.items()}
            if m <= GEMV_MAX_ROWS:  # the other kernel that could run the MLP here: two gemv launches
                impls["gemv_pair"] = lambda: cute_ops.gemv(cute_ops.gemv(x, packed, activation="swiglu"), w_down)
            impls["cublas_graph"] = lambda: mlp._mlp(x, w_gate_up, w_down)
            impls["torch_compile"] = lambda: compiled(x, w_gate_up, w_down)
            return impls

        case = Case("fused_mlp", "gemm_pair", {"M": m}, torch.bfloat16, setup,
                    bytes=3 * mlp.HIDDEN * mlp.INTER * 2,
                    impls=tuple(chosen) + (("gemv_pair",) if m <= GEMV_MAX_ROWS else ()) + ("cublas_graph", "torch_compile"),
                    read_dominated=True)
        times, _ = time_case(case)
        best = min(times[k] for k in ("cublas_graph", "torch_compile") if k in times)
        print(f"== {torch.cuda.get_device_name()} M={m}: best baseline {best:.1f} us", flush=True)
        for name, us in sorted(times.items(), key=lambda kv: kv[1]):
            print(f"  {name:24s} {us:9.1f} us  {best / us:6.3f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
