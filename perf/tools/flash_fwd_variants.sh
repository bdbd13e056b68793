#!/usr/bin/env bash
# Rebuilds flash_fwd (sm_90a only) with each setting of the sm90 kernel's schedule knobs
# (csrc/flash_fwd/flash_fwd_launch_sm90.h: overlap, ping-pong, persistent scheduler) and runs
# perf/tools/flash_fwd_quick.py on each: for a device run while tuning; the chosen defaults are committed by hand. Logs go to $OUT. A setting
# costs a full build of flash_fwd (about 2 minutes on 16 cores) plus the quick run, so one or two
# settings fit a device command's 10 minutes:
#   VARIANTS="1:1:1" bash perf/tools/flash_fwd_variants.sh          # overlap, ping-pong, persistent: on
#   VARIANTS="1:1:0 0:0:1" bash perf/tools/flash_fwd_variants.sh 128:16384 128:2048
#   EXTRA_FLAGS="-DCUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB=8" bash perf/tools/flash_fwd_variants.sh 128:2048
#   EXTRA_FLAGS="-DCUTE_OPS_FLASH_FWD_SM90_D64_STAGES=2" bash perf/tools/flash_fwd_variants.sh 64:512 64:2048:causal
# Each variant's build replaces the editable install's extension, so run the quick tool right after
# its build (as here), or from a copy of the tree with its own PYTHONPATH: perf/tools/flash_fwd_quick.py
# imports cute_ops through the installed package.
set -u
out="${OUT:-build/flash_fwd_variants}"
mkdir -p "$out"
for v in ${VARIANTS:-1:1:1}; do
  IFS=: read -r overlap pingpong persistent <<<"$v"
  persistent=${persistent:-1}
  # EXTRA_FLAGS' knobs in the log names, so that runs with other flags in one $OUT keep their logs.
  extra=$(printf '%s' "${EXTRA_FLAGS:-}" | sed -e 's/-DCUTE_OPS_FLASH_FWD_SM90_//g' -e 's/[^A-Za-z0-9=]\+/_/g' -e 's/=/-/g')
  tag="$overlap$pingpong$persistent${extra:+_$extra}"
  echo "== overlap $overlap, ping-pong $pingpong, persistent $persistent ${EXTRA_FLAGS:-}"
  if ! NVCC_APPEND_FLAGS="-DCUTE_OPS_FLASH_FWD_SM90_OVERLAP=$overlap -DCUTE_OPS_FLASH_FWD_SM90_PINGPONG=$pingpong \
-DCUTE_OPS_FLASH_FWD_SM90_PERSISTENT=$persistent ${EXTRA_FLAGS:-}" \
      CUTE_OPS_FAMILIES=flash_fwd CUTE_OPS_ARCHS=90a MAX_JOBS="$(nproc)" \
      python3 -m pip install --no-deps --no-build-isolation -e . >"$out/build_$tag.log" 2>&1; then
    echo "build failed"; tail -20 "$out/build_$tag.log"; continue
  fi
  timeout 200 python3 perf/tools/flash_fwd_quick.py "$@" 2>&1 | tee "$out/quick_$tag.log"
done
