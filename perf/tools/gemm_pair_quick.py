"""Quick timing of fused_mlp against cuBLAS (graph-replayed) at a few M, with the harness's timing:
for comparing tile configs while iterating. Usage: python perf/tools/gemm_pair_quick.py 1 16 64

QUICK_KEEP=ours,cublas_graph (a comma list of the case's implementations) times only those: for
A/B rounds of builds, where torch.compile's baseline would be compiled again in every round."""
from __future__ import annotations

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import cases_gemm_pair  # noqa: E402
from harness import time_case  # noqa: E402

KEEP = tuple(os.environ.get("QUICK_KEEP", "ours,ours_sm80,ours_sm90,ours_two_launches,cublas_graph,torch_compile")
             .split(","))

for m in [int(a) for a in sys.argv[1:]] or [1, 16, 64, 128]:
    case = cases_gemm_pair._mlp_case(m)
    setup = case.setup
    case.setup = lambda setup=setup: {k: v for k, v in setup().items() if k in KEEP}
    times, _ = time_case(case)
    row = "  ".join(f"{k} {v:8.1f}" for k, v in times.items())
    ratio = (f"  ours/cublas {times['cublas_graph'] / times['ours']:.3f}x"
             if "ours" in times and "cublas_graph" in times else "")
    print(f"{torch.cuda.get_device_name()} M={m:5d}  {row}{ratio}", flush=True)
