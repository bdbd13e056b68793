#!/usr/bin/env python3
"""Times our fused_mlp alone at the benchmark's LLaMA-3-8B shapes, timed as perf/run.py times it,
for A/B comparisons of two builds: run it once per build (each from its own tree on PYTHONPATH),
alternating, in one session on one GPU.

    PYTHONPATH=<tree A> python perf/tools/ab_mlp.py 128 512 2048
    PYTHONPATH=<tree B> python perf/tools/ab_mlp.py 128 512 2048

Prints one JSON line per M: the time and which cute_ops was loaded.
"""
from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import cases_gemm_pair  # noqa: E402
import cute_ops  # noqa: E402
from harness import time_case  # noqa: E402


def main() -> None:
    for m in map(int, sys.argv[1:]):
        case = cases_gemm_pair._mlp_case(m)
        setup = case.setup
        case.setup = lambda setup=setup: {"ours": setup()["ours"]}
        times, how = time_case(case)
        print(json.dumps({"M": m, "ours_us": round(times["ours"], 2), "timing": how["ours"],
                          "cute_ops": str(pathlib.Path(cute_ops.__file__).parent)}), flush=True)


if __name__ == "__main__":
    main()
