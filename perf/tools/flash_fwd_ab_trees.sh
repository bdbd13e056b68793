#!/usr/bin/env bash
# A/B of several versions of csrc/flash_fwd in one device call: for each folder given (one holding
# a csrc/flash_fwd of its own, e.g. another branch's, unpacked before the call), build flash_fwd
# (sm_90a only) with it in place and run perf/tools/flash_fwd_quick.py on the shapes; the
# working tree's own csrc/flash_fwd is put back at the end. About 2 minutes a build on 16 cores.
# Prepare the folders on the CPU machine (untracked, so the device call carries them), and delete
# them after:
#   for r in main wip/flash-fwd-early-fetch; do mkdir -p ab/$r; git archive $r csrc/flash_fwd | tar -x -C ab/$r; done
#   # device:
#   TREES="ab/main ab/wip/flash-fwd-early-fetch" bash perf/tools/flash_fwd_ab_trees.sh 128:4096:causal:llama 64:2048:causal
# Logs go to $OUT. QUICK_KEEP (default ours,sdpa_cudnn) and QUICK_CHECK (default 1: the reference
# check of each build first) pass through to the quick tool.
set -u
out="${OUT:-build/flash_fwd_ab_trees}"
mkdir -p "$out"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 1
saved="$(mktemp -d)"
cp -r csrc/flash_fwd "$saved/"
for tree in ${TREES:?TREES names the folders to compare}; do
  tag=$(echo "$tree" | tr '/' '_')
  echo "== $tree"
  if [ ! -d "$tree/csrc/flash_fwd" ]; then echo "no $tree/csrc/flash_fwd"; continue; fi
  rm -rf csrc/flash_fwd && cp -r "$tree/csrc/flash_fwd" csrc/flash_fwd
  if ! CUTE_OPS_FAMILIES=flash_fwd CUTE_OPS_ARCHS=90a MAX_JOBS="$(nproc)" \
      python3 -m pip install --no-deps --no-build-isolation -e . >"$out/build_$tag.log" 2>&1; then
    echo "build failed"; tail -20 "$out/build_$tag.log"; continue
  fi
  QUICK_KEEP="${QUICK_KEEP:-ours,sdpa_cudnn}" timeout 300 python3 perf/tools/flash_fwd_quick.py "$@" 2>&1 |
    grep -v Warn | tee "$out/quick_$tag.log"
done
rm -rf csrc/flash_fwd && cp -r "$saved/flash_fwd" csrc/flash_fwd && rm -rf "$saved"
