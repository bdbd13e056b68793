#!/usr/bin/env bash
# A/B of a build knob on one warm machine, for a device run: builds the extension twice (A: the
# default build, B: with $FLAGS), keeps both shared objects outside the repo, and runs each
# command given under A, B, B, A (the extension swapped in place between rounds), so that drifts of
# the machine fall on both sides alike. Optional $TESTS runs under B once, before the rounds (the
# knob's own correctness first). Logs go to $OUT.
#
#   FLAGS="-DCUTE_OPS_GEMV_STREAM_K=1" TESTS="tests/test_gemv.py" bash perf/tools/knob_ab.sh \
#     "python3 perf/tools/llama_breakdown.py --graph | head -3" \
#     "torchrun --nproc-per-node 2 perf/tools/llama_breakdown.py --graph | head -3"
#
# A full build each (about 80 s on 32 cores, 180 s on 16, with CUTE_OPS_ARCHS=90a); set
# CUTE_OPS_FAMILIES to build fewer when the commands need fewer ops. A failed build or a failed
# test stops it; on any exit the default build is put back in place. With $KEEP set (a folder
# outside the repo, e.g. /tmp/knob_keep) the builds stay there, named by their flags, and a later
# call on the same warm machine reuses them instead of building again.
set -uo pipefail
: "${FLAGS:?set FLAGS to nvcc flags, e.g. -DCUTE_OPS_GEMV_STREAM_K=1}"
out="${OUT:-/tmp/knob_ab}"
keep="${KEEP:-$(mktemp -d)}"
tag="$(printf '%s' "$FLAGS" | tr -c 'A-Za-z0-9_=' '_')"  # B's file name: its flags
mkdir -p "$out" "$keep"
export CXX="${CXX:-/usr/bin/g++}" MAX_JOBS="${MAX_JOBS:-$(nproc)}"

the_so() {  # the extension's one shared object (the editable install builds it in place)
  local found=(cute_ops/_C*.so)
  if [ "${#found[@]}" -ne 1 ] || [ ! -f "${found[0]}" ]; then echo "expected one cute_ops/_C*.so, found: ${found[*]}" >&2; exit 1; fi
  echo "${found[0]}"
}

build() {  # $1: nvcc flags, $2: A or B's tag
  if [ -n "${KEEP:-}" ] && [ -f "$keep/$2.so" ]; then echo "reusing $keep/$2.so"; return; fi
  rm -rf build
  if ! NVCC_APPEND_FLAGS="$1" python3 -m pip install --no-deps --no-build-isolation -e . >"$out/build_$2.log" 2>&1; then
    echo "build $2 failed"; tail -30 "$out/build_$2.log"; exit 1
  fi
  cp "$(the_so)" "$keep/$2.so" || exit 1
}

t0=$(date +%s)
build "" A
trap 'cp "$keep/A.so" "$(the_so)"; [ -n "${KEEP:-}" ] || rm -rf "$keep"' EXIT  # the default build back in place
build "$FLAGS" "$tag"
echo "built A and B ($FLAGS) in $(( $(date +%s) - t0 ))s"
so=$(the_so)
if [ -n "${TESTS:-}" ]; then
  cp "$keep/$tag.so" "$so" || exit 1
  echo "== tests under B: $TESTS"
  python3 -m pytest -q -ra $TESTS >"$out/tests_B.log" 2>&1
  rc=$?
  tail -3 "$out/tests_B.log"
  [ "$rc" = 0 ] || { echo "tests under B failed: no timing"; exit 1; }
fi
for round in A B B A; do
  if [ "$round" = A ]; then cp "$keep/A.so" "$so" || exit 1; else cp "$keep/$tag.so" "$so" || exit 1; fi
  for cmd in "$@"; do
    echo "== $round: $cmd"
    eval "$cmd" 2>&1 | tee -a "$out/ab_$round.log"
  done
done
