#!/usr/bin/env bash
# Rebuilds flash_fwd (sm_90a only) with each setting of the sm90 kernel's schedule knobs
# (csrc/flash_fwd/flash_fwd_launch_sm90.h) and runs perf/tools/flash_fwd_quick.py on each: for a
# device run while tuning; the chosen defaults are committed by hand. Logs go to $OUT. A setting
# costs a full build of flash_fwd (about 2 minutes on 16 cores) plus the quick run, so one or two
# settings fit a device command's 10 minutes:
#   VARIANTS="1:1" bash perf/tools/flash_fwd_variants.sh            # overlap on, ping-pong on
#   VARIANTS="0:1 0:0" bash perf/tools/flash_fwd_variants.sh 128:16384
set -u
out="${OUT:-build/flash_fwd_variants}"
mkdir -p "$out"
for v in ${VARIANTS:-1:1}; do
  overlap=${v%:*}; pingpong=${v#*:}
  echo "== overlap $overlap, ping-pong $pingpong"
  if ! NVCC_APPEND_FLAGS="-DCUTE_OPS_FLASH_FWD_SM90_OVERLAP=$overlap -DCUTE_OPS_FLASH_FWD_SM90_PINGPONG=$pingpong" \
      CUTE_OPS_FAMILIES=flash_fwd CUTE_OPS_ARCHS=90a MAX_JOBS="$(nproc)" \
      python3 -m pip install --no-deps --no-build-isolation -e . >"$out/build_$overlap$pingpong.log" 2>&1; then
    echo "build failed"; tail -20 "$out/build_$overlap$pingpong.log"; continue
  fi
  timeout 200 python3 perf/tools/flash_fwd_quick.py "$@" 2>&1 | tee "$out/quick_$overlap$pingpong.log"
done
