#!/usr/bin/env bash
# The GPU check: build, run the whole test suite, run the benchmarks, write this GPU's results
# file perf/results/<gpu>.json (and its copy perf/results/latest.json). Meant for a GPU machine
# with no network (CUTLASS headers in third_party/cutlass, see scripts/fetch_cutlass.py). Logs and
# the results files written are copied to $OUT when set.
#
#   bash scripts/gpu_check.sh --commit SHA       # everything; SHA recorded as the commit measured
#   bash scripts/gpu_check.sh --no-bench         # build + tests
#   bash scripts/gpu_check.sh --pytest-bench     # also the pytest-benchmark suite (slower)
#   CUTE_OPS_FAMILIES=norm bash scripts/gpu_check.sh --tests "-k norm" --bench-families norm
#   # a full run in two commands at one commit (perf/run.py merges the second into the first's file):
#   bash scripts/gpu_check.sh --commit SHA --bench-families norm,rope,flash_fwd --bench-replace
#   bash scripts/gpu_check.sh --commit SHA --no-tests --bench-families flash_decode,gemm_pair
#   # on a host of two or more GPUs: the model's families (llama_*) on the second GPU while the
#   # kernels' run on the first, then merged into one file (perf/run.py --merge); about 450 s
#   # instead of 640 on two H200s:
#   bash scripts/gpu_check.sh --commit SHA --no-tests --split-gpus
#   # tensor parallelism on a host of N GPUs: its tests, then perf/run_tp.py under torchrun
#   # (perf/results/<gpu>x<N>.json) instead of perf/run.py:
#   bash scripts/gpu_check.sh --commit SHA --tp 2 --tests "tests/test_llama_tp.py tests/test_llama.py"
#
# The commit recorded is $CUTE_OPS_COMMIT (or --commit): the device's git copy may report a stale
# HEAD, so without it perf/run.py records git's HEAD marked as possibly stale.
set -uo pipefail
cd "$(dirname "$0")/.."

bench=1; tests=1; pytest_bench=0; test_args=""; bench_families=""; bench_replace=0; tp=1; split_gpus=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) bench=0 ;;
    --no-tests) tests=0 ;;
    --pytest-bench) pytest_bench=1 ;;
    --tests) test_args="$2"; shift ;;
    --bench-families) bench_families="$2"; shift ;;
    --bench-replace) bench_replace=1 ;;
    --commit) export CUTE_OPS_COMMIT="$2"; shift ;;
    --tp) tp="$2"; shift ;;
    --split-gpus) split_gpus=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$tp" in ''|*[!0-9]*) echo "--tp needs a number of GPUs, got '$tp'" >&2; exit 2 ;; esac
if [ "$tp" -gt 1 ] && { [ -n "$bench_families" ] || [ "$pytest_bench" = 1 ]; }; then
  echo "--tp runs perf/run_tp.py only: --bench-families and --pytest-bench do not apply" >&2; exit 2
fi
# The model's default all-reduce is the peer kernel (family allreduce): without it the ranks fall
# back to NCCL and the results file would time the fallback (session 68 lost a call to that).
if [ "$tp" -gt 1 ] && [ -n "${CUTE_OPS_FAMILIES:-}" ] && ! tr , '\n' <<<"$CUTE_OPS_FAMILIES" | grep -qx allreduce; then
  echo "--tp needs the allreduce family built: CUTE_OPS_FAMILIES=$CUTE_OPS_FAMILIES lacks it" >&2; exit 2
fi
if [ "$split_gpus" = 1 ] && { [ "$tp" -gt 1 ] || [ "$pytest_bench" = 1 ]; }; then
  echo "--split-gpus runs perf/run.py's families on two GPUs: --tp and --pytest-bench do not apply" >&2; exit 2
fi
logs="${OUT:-build/gpu_check}"
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "== $1 ($(date +%T))"; }

# NVLink multicast stays off in every process (cute_ops/models/llama/parallel.py says why).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

step "machine"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
python3 scripts/fetch_cutlass.py --check || { echo "CUTLASS headers missing"; exit 1; }
echo "commit: ${CUTE_OPS_COMMIT:-unset (perf/run.py falls back to git HEAD, marked as possibly stale)}"

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

if [ "$tests" = 1 ]; then
  step "tests"
  # --tests may name test files (then only those run) or pass options (added to the whole suite).
  where=tests; case "$test_args" in tests/*) where="" ;; esac
  # shellcheck disable=SC2086
  python3 -m pytest -q -ra $where $test_args >"$logs/tests.log" 2>&1 || status=1
  tail -25 "$logs/tests.log"
fi

if [ "$bench" = 1 ] && [ "$tp" -gt 1 ]; then
  step "tensor-parallel benchmarks ($tp GPUs)"
  stamp=$(mktemp)
  torchrun --nproc-per-node "$tp" perf/run_tp.py >"$logs/perf_tp.log" 2>&1 || { status=1; tail -40 "$logs/perf_tp.log"; }
  if [ -n "${OUT:-}" ]; then
    find perf/results -maxdepth 1 -name '*.json' -newer "$stamp" -exec cp {} "$OUT/" \;
  fi
  rm -f "$stamp"
  sed -n '/^wrote/,$p' "$logs/perf_tp.log"
  bench=0
fi

if [ "$bench" = 1 ] && [ "$split_gpus" = 1 ]; then
  step "benchmarks on two GPUs"
  # The GPUs this process may use (CUDA_VISIBLE_DEVICES's list, else nvidia-smi's), the first two.
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
  else mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader); fi
  if [ "${#gpus[@]}" -lt 2 ]; then echo "--split-gpus needs two GPUs, found ${#gpus[@]}"; exit 1; fi
  families="${bench_families:-$(python3 -c 'import sys; sys.path.insert(0, "perf"); import registry; print(",".join(registry.FAMILIES))')}"
  model=$(tr , '\n' <<<"$families" | grep '^llama_' | paste -sd, -)
  kernels=$(tr , '\n' <<<"$families" | grep -v '^llama_' | paste -sd, -)
  if [ -z "$model" ] || [ -z "$kernels" ]; then echo "--split-gpus needs kernel and llama_* families, got $families"; exit 1; fi
  replace=(); [ "$bench_replace" = 1 ] || [ -z "$bench_families" ] && replace=(--replace)
  stamp=$(mktemp); split_ok=1
  rm -f "$logs/model_part.json" "$logs/perf_merge.log"
  CUDA_VISIBLE_DEVICES="${gpus[1]}" python3 perf/run.py --families "$model" --out "$logs/model_part.json" \
    >"$logs/perf_model.log" 2>&1 &
  model_pid=$!
  CUDA_VISIBLE_DEVICES="${gpus[0]}" python3 perf/run.py --families "$kernels" "${replace[@]}" >"$logs/perf.log" 2>&1 \
    || { status=1; split_ok=0; tail -40 "$logs/perf.log"; }
  wait "$model_pid" || { status=1; split_ok=0; tail -40 "$logs/perf_model.log"; }
  if [ "$split_ok" = 1 ]; then  # (not $status: a failed test must not keep the model's rows out)
    python3 perf/run.py --merge "$logs/model_part.json" >"$logs/perf_merge.log" 2>&1 || { status=1; tail -20 "$logs/perf_merge.log"; }
  else
    echo "a benchmark run failed: $logs/model_part.json not merged"
  fi
  if [ -n "${OUT:-}" ]; then
    find perf/results -maxdepth 1 -name '*.json' -newer "$stamp" -exec cp {} "$OUT/" \;
  fi
  rm -f "$stamp"
  step "summary"
  sed -n '/^wrote/,$p' "$logs/perf.log"
  sed -n '/^wrote/,$p' "$logs/perf_model.log"
  head -3 "$logs/perf_merge.log" 2>/dev/null
  bench=0
fi

if [ "$bench" = 1 ]; then
  step "benchmarks"
  run_args=(); [ -n "$bench_families" ] && run_args=(--families "$bench_families")
  [ "$bench_replace" = 1 ] && run_args+=(--replace)
  stamp=$(mktemp)
  python3 perf/run.py "${run_args[@]}" >"$logs/perf.log" 2>&1 || { status=1; tail -40 "$logs/perf.log"; }
  # The results files this run wrote: the per-GPU file and latest.json.
  if [ -n "${OUT:-}" ]; then
    find perf/results -maxdepth 1 -name '*.json' -newer "$stamp" -exec cp {} "$OUT/" \;
  fi
  rm -f "$stamp"
  if [ "$pytest_bench" = 1 ]; then
    python3 -m pytest -q perf --benchmark-json="$logs/pytest_benchmark.json" \
      --benchmark-columns=median,iqr,rounds >"$logs/pytest_bench.log" 2>&1 || status=1
    tail -5 "$logs/pytest_bench.log"
  fi
  step "summary"
  sed -n '/^wrote/,$p' "$logs/perf.log"
fi
exit $status
