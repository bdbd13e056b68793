#pragma once
// The SM90 tile config per block_m and the launch of one instantiation (run_gemm_pair_sm90_<Element,
// kBlockM>), which the files under instantiations/ compile one (dtype, block_m) at a time. The
// kernel is persistent: one CTA per SM slot, each taking tickets until they run out. The TMA
// descriptors of both GEMMs are encoded on the host at each call (four tensor maps; six at
// M < block_m, where A loads in row boxes) and travel in the kernel's argument, so a captured
// launch replays with them.
#include <algorithm>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/kernel_attributes.h"
#include "gemm_pair/gemm_pair_kernel_sm90.h"
#include "gemm_pair/mainloop_sm90.h"

namespace cute_ops {

namespace gemm_pair {

// MainloopSm90<element, block_m, stages> and the kernel's register split and occupancy, measured
// on an H100 (the 128-row depth on an H200 too; docs/perf-notes.md, gemm_pair, sessions 33-37):
//   block_m 64: one consumer warp group, 24 KB a stage, 8 stages, one CTA an SM: 8-13% faster at
//     M = 1..64 than 4 stages at two CTAs an SM (the weights stream at 192 KB in flight an SM).
//   block_m 128: two consumer warp groups (64 rows each), 32 KB a stage, 6 stages, one CTA an SM
//     with CUTLASS's register split for this tiling. The op picks it at 64 < M < 512, where the
//     weights' stream is most of the time: 6 stages beat 4 by 2-3% at M = 96-256 (H100) and 3-5%
//     at M = 96-384 (H200), although the ring then shares shared memory with the staging tile
//     (no epilogue overlap). Forced at M >= 512, 6 stages were 3-10% slower than 4 (session 33).
//     Two CTAs an SM do not compile: 80 registers a thread cannot hold a 64 x 128 wgmma's
//     accumulators.
//   block_m 256: two consumer warp groups of 128 rows each (two 64-row slabs, 128 rows apart),
//     48 KB a stage, 4 stages sharing shared memory with the staging tile (the next tile loads
//     only after an epilogue, unless the register epilogue runs it). A third fewer L2
//     bytes a flop than 128 rows, which run L2 at 88% of its peak at M = 8192 (ncu): 1.27x faster
//     there, 1.10x at M = 512.
// The 128-row ring depth, a knob for tuning runs: rebuild with
// NVCC_APPEND_FLAGS=-DCUTE_OPS_GEMM_PAIR_SM90_M128_STAGES=n (its objects removed first, since the
// flag is not part of the build's command lines); the default is the measured choice above.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_M128_STAGES
#define CUTE_OPS_GEMM_PAIR_SM90_M128_STAGES 6
#endif
// The 64-row ring depth, the same kind of knob. At 9 stages the ring no longer fits beside the
// staging tile, which then shares it (kOverlapEpilogue false), as at 128 and 256 rows.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_M64_STAGES
#define CUTE_OPS_GEMM_PAIR_SM90_M64_STAGES 8
#endif
// 1: a call with fewer rows than a tile loads A in 16-row boxes (MainloopSm90); 0: one tile-high
// box whatever m, a knob for A/B runs, rebuilt like the one above.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_A_BOXES
#define CUTE_OPS_GEMM_PAIR_SM90_A_BOXES 1
#endif
template <int kBlockM, typename Element>
struct TileConfigSm90;
template <typename E> struct TileConfigSm90<64, E> {
  using Mainloop = MainloopSm90<E, 64, CUTE_OPS_GEMM_PAIR_SM90_M64_STAGES>;
  static constexpr int kLoadRegs = 40, kMmaRegs = 232, kCtasPerSm = 1;
};
template <typename E> struct TileConfigSm90<128, E> {
  using Mainloop = MainloopSm90<E, 128, CUTE_OPS_GEMM_PAIR_SM90_M128_STAGES>;
  static constexpr int kLoadRegs = 40, kMmaRegs = 232, kCtasPerSm = 1;
};

template <typename E> struct TileConfigSm90<256, E> {
  using Mainloop = MainloopSm90<E, 256, 4>;
  static constexpr int kLoadRegs = 40, kMmaRegs = 232, kCtasPerSm = 1;
};

template <typename Config, bool kSplitK0>
using KernelSm90For = GemmPairKernelSm90<typename Config::Mainloop, kSplitK0, Config::kLoadRegs, Config::kMmaRegs,
                                         Config::kCtasPerSm>;

template <typename Kernel>
auto prepared_kernel_sm90() {
  constexpr int kSmem = Kernel::kSmemBytes;
  auto kernel = &gemm_pair_kernel_sm90<Kernel>;
  if constexpr (kSmem > 48 * 1024) {
    static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
    smem_opt_in.apply(kernel, kSmem, "gemm_pair shared memory");
  }
  return kernel;
}

template <typename Config>
void launch_gemm_pair_sm90(const GemmPairParams& p, cudaStream_t stream) {
  using Kernel = KernelSm90For<Config, false>;
  using KernelSplitK0 = KernelSm90For<Config, true>;
  using Mainloop = typename Config::Mainloop;
  static_assert(Kernel::kSmemBytes == KernelSplitK0::kSmemBytes);
  typename Kernel::Params params;
  params.p = p;
  // A one-row a may have any row stride; TMA wants a multiple of 16 bytes, and never reads it.
  const int64_t lda = p.m == 1 ? (p.k + 7) / 8 * 8 : p.lda;
  constexpr bool kABoxes = CUTE_OPS_GEMM_PAIR_SM90_A_BOXES != 0;
  params.gemm[0] = Mainloop::make_params(p.a, lda, p.b0, p.m, p.n0, p.k, kABoxes);
  params.gemm[1] = Mainloop::make_params(p.h, p.h_width, p.b1, p.m, p.n1, p.h_width, kABoxes);
  if constexpr (Kernel::kStoreWarp) params.store_h = Kernel::HStore::make_params(p.h, p.m, p.h_width);
  auto kernel = p.splits0 > 1 ? prepared_kernel_sm90<KernelSplitK0>() : prepared_kernel_sm90<Kernel>();
  // Persistent CTAs: one per slot of the device, fewer when there are fewer tickets.
  int device = 0;
  check_cuda(cudaGetDevice(&device), "current device");
  const int grid = std::min(p.num_tiles, device_info(device).sms * Kernel::kCtasPerSm);
  if constexpr (Kernel::kPdlPrefetch > 0) {
    launch_dependent(true, kernel, dim3(grid), dim3(Kernel::kNThreads), Kernel::kSmemBytes, stream, params);
  } else {
    kernel<<<grid, Kernel::kNThreads, Kernel::kSmemBytes, stream>>>(params);
  }
  CUTE_OPS_CHECK_LAUNCH("gemm_pair launch");
}

}  // namespace gemm_pair

template <typename Element, int kBlockM>
void run_gemm_pair_sm90_(const GemmPairParams& p, cudaStream_t stream) {
  gemm_pair::launch_gemm_pair_sm90<gemm_pair::TileConfigSm90<kBlockM, Element>>(p, stream);
}

// CTAs of this config that fit on one SM of the current device (without GEMM0's K-split).
template <typename Element, int kBlockM>
int gemm_pair_ctas_per_sm_sm90_() {
  using Kernel = gemm_pair::KernelSm90For<gemm_pair::TileConfigSm90<kBlockM, Element>, false>;
  int ctas = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, gemm_pair::prepared_kernel_sm90<Kernel>(),
                                                           Kernel::kNThreads, Kernel::kSmemBytes),
             "gemm_pair occupancy");
  return ctas;
}

}  // namespace cute_ops
