#!/usr/bin/env bash
# Rebuilds gemm_pair with each tile-config variant below (edits gemm_pair_launch.h in this copy)
# and times it: for a device run while tuning; the chosen config is committed by hand.
# A variant gives each config's MainloopSm80 arguments (csrc/gemm_pair/mainloop_sm80.h):
#   E, block_m, kGemmPairBlockN, block_k, stages, warps along M, warps along N[, L2 prefetch bytes]
# e.g. variant base "E, 16, kGemmPairBlockN, 64, 4, 1, 4, 256" "E, 64, kGemmPairBlockN, 128, 3, 2, 4, 256" \
#                   "E, 128, kGemmPairBlockN, 64, 3, 2, 2"
set -u
L=csrc/gemm_pair/gemm_pair_launch.h
cp $L /tmp/launch.orig
variant() {  # name, 16 config args, 64 config args, 128 config args
  cp /tmp/launch.orig $L
  sed -i "s/TileConfig<16, E> { using Mainloop = MainloopSm80<[^;]*;/TileConfig<16, E> { using Mainloop = MainloopSm80<$2>;/" $L
  sed -i "s/TileConfig<64, E> { using Mainloop = MainloopSm80<[^;]*;/TileConfig<64, E> { using Mainloop = MainloopSm80<$3>;/" $L
  sed -i "s/TileConfig<128, E> { using Mainloop = MainloopSm80<[^;]*;/TileConfig<128, E> { using Mainloop = MainloopSm80<$4>;/" $L
  grep "TileConfig<" $L | grep MainloopSm80
  CUTE_OPS_FAMILIES=gemm_pair CUTE_OPS_ARCHS=90a MAX_JOBS=16 python3 -m pip install --no-deps --no-build-isolation -e . > $OUT/build_$1.log 2>&1 || { echo "build $1 failed"; tail -20 $OUT/build_$1.log; return; }
  echo "== $1"
  timeout 150 python3 perf/tools/gemm_pair_quick.py ${MS:-1 16 64 128}
}
