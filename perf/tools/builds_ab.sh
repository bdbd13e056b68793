#!/usr/bin/env bash
# A/B of several build variants on one warm machine of two GPUs or more, for a device run: each
# variant is built once (flags appended to nvcc's) into its own copy of the tree outside the repo,
# then the given command runs on GPU $BENCH_GPU in rounds over the variants, forward then backward
# (A B C C B A), so that drifts of the machine fall on every side alike. Meanwhile GPU $TEST_GPU runs
# $TESTS under each variant but the first (the default build, already tested), then $SANITIZE (a
# command run under compute-sanitizer memcheck and racecheck, e.g. scripts/sanitizer_cases.py
# flash_fwd), and then $SIDE (any command, run from the repo, e.g. a timeline). Few files come back
# from a device run, so everything goes to three logs in $OUT: builds.log, side.log (tests,
# sanitizer, $SIDE) and ab.log (the rounds), and the rounds' output is printed as it comes.
#
#   VARIANTS="A=;B=-DCUTE_OPS_FLASH_FWD_SM90_SOME_KNOB=1;C=-DCUTE_OPS_FLASH_FWD_SM90_OTHER_KNOB=0" \
#   CUTE_OPS_FAMILIES=flash_fwd TESTS=tests/test_flash_fwd.py \
#   SANITIZE="scripts/sanitizer_cases.py flash_fwd" bash perf/tools/builds_ab.sh \
#     "QUICK_KEEP=ours,sdpa_cudnn QUICK_CHECK=0 python3 perf/tools/flash_fwd_quick.py 64:512:causal 128:2048"
#
# VARIANTS: NAME=FLAGS pairs separated by ';', the first the baseline. A build takes about 75 s on
# 32 cores with CUTE_OPS_ARCHS=90a and one family. A failed build stops it. Failed tests do not stop
# the rounds (they run alongside): read a variant's timing only if side.log shows its tests passed.
# The repo is left with the first variant's build in place.
set -uo pipefail
: "${VARIANTS:?set VARIANTS, e.g. A=;B=-DKNOB=1}"
out="${OUT:-/tmp/builds_ab}"
bench_gpu="${BENCH_GPU:-0}" test_gpu="${TEST_GPU:-1}"
mkdir -p "$out"
export CXX="${CXX:-/usr/bin/g++}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"
repo="$(pwd)"

names=() flags=()
IFS=';' read -ra pairs <<<"$(printf '%s' "$VARIANTS" | tr '\n' ' ')"  # (a VARIANTS string may wrap)
for pair in "${pairs[@]}"; do
  pair="$(echo "$pair" | sed 's/^ *//; s/ *$//')"
  [ -n "$pair" ] || continue
  names+=("${pair%%=*}")
  flags+=("${pair#*=}")
done

t0=$(date +%s)
for i in "${!names[@]}"; do
  name="${names[$i]}" dir="/tmp/builds_ab_${names[$i]}"
  rm -rf build
  echo "== build $name (${flags[$i]:-default})" >>"$out/builds.log"
  if ! NVCC_APPEND_FLAGS="${flags[$i]}" python3 -m pip install --no-deps --no-build-isolation -e . >>"$out/builds.log" 2>&1; then
    echo "build $name failed"; tail -30 "$out/builds.log"; exit 1
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  tar --exclude=./build --exclude=./third_party --exclude=./.git -cf - . | tar -xf - -C "$dir"
  echo "built $name in $(( $(date +%s) - t0 )) s"
done
cp "/tmp/builds_ab_${names[0]}"/cute_ops/_C*.so cute_ops/ || exit 1  # the baseline in the repo

# The other GPU: the variants' tests, the sanitizer, the side command.
(
  for i in "${!names[@]}"; do
    [ "$i" = 0 ] && continue
    dir="/tmp/builds_ab_${names[$i]}"
    if [ -n "${TESTS:-}" ]; then
      echo "== tests under ${names[$i]}: $TESTS"
      (cd "$dir" && PYTHONPATH="$dir" CUDA_VISIBLE_DEVICES="$test_gpu" python3 -m pytest -q -ra $TESTS 2>&1 | tail -4)
    fi
    if [ -n "${SANITIZE:-}" ]; then
      for tool in memcheck racecheck; do
        echo "== $tool under ${names[$i]}: $SANITIZE"
        (cd "$dir" && PYTHONPATH="$dir" CUDA_VISIBLE_DEVICES="$test_gpu" compute-sanitizer --tool "$tool" python3 $SANITIZE 2>&1 |
          grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|error" | tail -5)
      done
    fi
  done
  if [ -n "${SIDE:-}" ]; then
    echo "== side: $SIDE"
    (cd "$repo" && CUDA_VISIBLE_DEVICES="$test_gpu" bash -c "$SIDE" 2>&1)
  fi
) >"$out/side.log" 2>&1 &
side=$!

order=("${names[@]}")
for (( i=${#names[@]}-1; i>=0; i-- )); do order+=("${names[$i]}"); done
for name in "${order[@]}"; do
  dir="/tmp/builds_ab_$name"
  for cmd in "$@"; do
    echo "== $name: $cmd" | tee -a "$out/ab.log"
    (cd "$dir" && PYTHONPATH="$dir" CUDA_VISIBLE_DEVICES="$bench_gpu" bash -c "$cmd" 2>&1) | tee -a "$out/ab.log"
  done
done
wait "$side"
echo "done in $(( $(date +%s) - t0 )) s; side.log:"
cat "$out/side.log"
