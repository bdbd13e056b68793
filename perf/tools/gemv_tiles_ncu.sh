#!/usr/bin/env bash
# Nsight Compute counters of the tile gemv (csrc/gemv/gemv_tiles.cuh, built with
# CUTE_OPS_GEMV_TILES=1) beside the Triton kernel of the same tiles and hand-over
# (gemv_tile_probe.py's tile_gemv_det), one launch each at the 8B's gate/up (K 4096, N 28672,
# M = 1) after a warm-up, L2 flushed before it (ncu's default): where the 20% between the two goes
# (docs/perf-notes.md, sessions 51 and 52), with the warps' largest stall reasons. For a device run after a build of the gemv family with the knob; reports go
# to $OUT. ncu leaves the clocks alone (--clock-control none).
#   CUTE_OPS_FAMILIES=gemv NVCC_APPEND_FLAGS=-DCUTE_OPS_GEMV_TILES=1 pip install --no-build-isolation -e .
#   bash perf/tools/gemv_tiles_ncu.sh
set -u
out="${OUT:-build/gemv_tiles_ncu}"
mkdir -p "$out"
for which in ours triton; do
  if [ "$which" = ours ]; then kernel=regex:gemv_tiles_kernel; else kernel=regex:tile_gemv_det; fi
  ncu --clock-control none -k "$kernel" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section Occupancy \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      -o "$out/gemv_tiles_$which" -f \
      python3 - "$which" <<'PY' >"$out/run_$which.log" 2>&1
import pathlib
import sys

import torch

k, n = 4096, 28672
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k**-0.5
x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
if sys.argv[1] == "ours":
    import cute_ops
    call = lambda: cute_ops.gemv(x, w)  # noqa: E731
else:
    sys.path.insert(0, str(pathlib.Path("perf/tools").resolve()))
    from gemv_tile_probe import kernels
    det = kernels()[2]
    out = torch.empty(n, device="cuda")
    parts = torch.empty(n * (k // 512), device="cuda")
    counters = torch.zeros(n // 16, dtype=torch.int32, device="cuda")
    call = lambda: det[(n // 16 * (k // 512),)](w, x[0], out, parts, counters, k, BR=16, C=512, num_warps=4)  # noqa: E731
for _ in range(3):
    call()
torch.cuda.synchronize()
PY
  echo "== $which"
  ncu --import "$out/gemv_tiles_$which.ncu-rep" --page details --print-units base 2>/dev/null |
    grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Hit Rate|Registers Per|Shared Memory Config|Static Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issued Ipc|No Eligible|Warp Cycles Per Issued|Active Warps Per|Eligible Warps" | head -30
  ncu --import "$out/gemv_tiles_$which.ncu-rep" --page raw --print-units base 2>/dev/null |
    grep -E "issue_stalled_.*_per_issue_active" | sort -k3 -g -r | head -8  # the largest stall reasons
  grep -iE "error|Traceback" "$out/run_$which.log" | head -5
done
