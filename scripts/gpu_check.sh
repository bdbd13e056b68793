#!/usr/bin/env bash
# The GPU check: build, run the whole test suite, run the benchmarks, write
# perf/results/latest.json. Meant for a GPU machine with no network (CUTLASS headers in
# third_party/cutlass, see scripts/fetch_cutlass.py). Logs and results are copied to $OUT when set.
#
#   bash scripts/gpu_check.sh                    # everything
#   bash scripts/gpu_check.sh --no-bench         # build + tests
#   bash scripts/gpu_check.sh --pytest-bench     # also the pytest-benchmark suite (slower)
#   CUTE_OPS_FAMILIES=norm bash scripts/gpu_check.sh --tests "-k norm" --bench-families norm
set -uo pipefail
cd "$(dirname "$0")/.."

bench=1; pytest_bench=0; test_args=""; bench_families=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --pytest-bench) pytest_bench=1 ;;
    --tests) test_args="$2"; shift ;;
    --bench-families) bench_families="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
logs="${OUT:-build/gpu_check}"
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "== $1 ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
python3 scripts/fetch_cutlass.py --check || { echo "CUTLASS headers missing"; exit 1; }

step "build"
# This workplace's GPU image sets CXX=/opt/gcc/bin/g++, which links a private static copy of
# libstdc++ into shared objects. Inside a PyTorch extension that copy's locale is never set up, and
# the first error message that formats a number segfaults (tests/test_norm.py's misaligned-view
# test catches it). The system g++ links the shared libstdc++, as PyTorch itself does.
if [ -n "${CXX:-}" ] && [ "$CXX" != /usr/bin/g++ ] && [ -x /usr/bin/g++ ]; then
  echo "using CXX=/usr/bin/g++ instead of $CXX"; export CXX=/usr/bin/g++
fi
t0=$(date +%s)
if ! MAX_JOBS="${MAX_JOBS:-$(nproc)}" python3 -m pip install --no-deps --no-build-isolation -v -e . \
    >"$logs/build.log" 2>&1; then
  tail -60 "$logs/build.log"; echo "BUILD FAILED"; exit 1
fi
grep -E "cute_ops setup:" "$logs/build.log" || true
echo "built in $(( $(date +%s) - t0 ))s"

step "tests"
# shellcheck disable=SC2086
python3 -m pytest -q -ra tests $test_args >"$logs/tests.log" 2>&1 || status=1
tail -25 "$logs/tests.log"

if [ "$bench" = 1 ]; then
  step "benchmarks"
  fam_arg=(); [ -n "$bench_families" ] && fam_arg=(--families "$bench_families")
  python3 perf/run.py "${fam_arg[@]}" >"$logs/perf.log" 2>&1 || { status=1; tail -40 "$logs/perf.log"; }
  [ -f perf/results/latest.json ] && [ -n "${OUT:-}" ] && cp perf/results/latest.json "$OUT/latest.json"
  if [ "$pytest_bench" = 1 ]; then
    python3 -m pytest -q perf --benchmark-json="$logs/pytest_benchmark.json" \
      --benchmark-columns=median,iqr,rounds >"$logs/pytest_bench.log" 2>&1 || status=1
    tail -5 "$logs/pytest_bench.log"
  fi
  step "summary"
  sed -n '/^wrote/,$p' "$logs/perf.log"
fi
exit $status
