#!/usr/bin/env bash
# Nsight Compute counters of the sm90 flash_fwd kernel at grid shapes given as D:S[:causal]
# (default: D = 128 at 2k and 16k, where the rate per key block differs by 17%; docs/perf-notes.md,
# issue 16): tensor-pipe activity, warp stall reasons, L2 hit rate and DRAM traffic, one launch
# each after a warm-up. For a device run, after a build of flash_fwd; reports go to $OUT. ncu
# leaves the clocks alone (--clock-control none), as the device notes ask.
#   bash perf/tools/flash_fwd_ncu.sh 128:2048 128:16384 64:2048:causal
set -u
out="${OUT:-build/flash_fwd_ncu}"
mkdir -p "$out"
for spec in "${@:-128:2048 128:16384}"; do
  for one in $spec; do
    tag=${one//:/_}
    ncu --clock-control none -k regex:flash_fwd_kernel_sm90 --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
        --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct \
        -o "$out/flash_fwd_$tag" -f \
        python3 - "$one" <<'PY' >"$out/run_$tag.log" 2>&1
import sys
import torch
import cute_ops
d, s, *rest = sys.argv[1].split(":")
d, s = int(d), int(s)
heads, batch = 2048 // d, 16384 // s  # the benchmark grid's shapes (perf/cases_flash.py)
q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for _ in range(3):
    cute_ops.flash_fwd(q, k, v, causal="causal" in rest)
torch.cuda.synchronize()
PY
    echo "== $one"
    ncu --import "$out/flash_fwd_$tag.ncu-rep" --page details --print-units base 2>/dev/null |
      grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate|hmma_cycles|sector_hit|Issued Ipc|No Eligible|Warp Cycles Per Issued|Stall" | head -30
  done
done
