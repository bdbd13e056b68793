#!/usr/bin/env bash
# Rebuilds the gemv family with each (warps a CTA, ring stages) variant given and times the gemv
# cases: for a device run while tuning; the chosen defaults are committed in
# csrc/gemv/gemv_kernel.cuh by hand.   usage: bash perf/tools/gemv_variants.sh 8,3 4,3 4,4
set -u
for v in "$@"; do
  warps=${v%,*} stages=${v#*,}
  rm -rf build
  NVCC_APPEND_FLAGS="-DCUTE_OPS_GEMV_WARPS=$warps -DCUTE_OPS_GEMV_STAGES=$stages" CUTE_OPS_FAMILIES=gemv \
    python setup.py build_ext --inplace > "$OUT/build_gemv_${warps}_${stages}.log" 2>&1 || { echo "build $v failed"; continue; }
  echo "== warps $warps, stages $stages"
  timeout 150 python perf/run.py --families gemv --out "$OUT/gemv_${warps}_${stages}.json" 2>&1 | grep "^gemv "
done
