#pragma once
// The tile config per block_m and the launch of one instantiation (run_gemm_pair_<Element,
// kBlockM>), which the files under instantiations/ compile one (dtype, block_m) at a time.
#include "common/cuda_check.h"
#include "common/kernel_attributes.h"
#include "gemm_pair/epilogue.h"
#include "gemm_pair/gemm_pair_kernel.h"
#include "gemm_pair/mainloop_sm80.h"
#include "gemm_pair/tile_scheduler.h"

namespace cute_ops {

namespace gemm_pair {

// MainloopSm80<element, block_m, block_n, block_k, stages, warps along M, warps along N, L2
// prefetch bytes>, measured on an H100 and an H200 (docs/perf-notes.md, gemm_pair). block_n is
// kGemmPairBlockN for every config (pack_gate_up's layout depends on it). block_m 16 and 64 serve
// decode-sized M, where tiles stream weights: what counts is the DRAM access pattern and the bytes
// in flight. A 256-byte L2 prefetch (block_m 16) or 128-wide K tiles (block_m 64) read each weight
// row in 256-byte runs: 5-14% faster than 128-byte runs; deeper rings (6 stages) were slower.
// block_m 64 fits one CTA an SM, whose mma.sync issue then limits it: 8 warps (2 x 4, warp tile
// 32 x 32) were 5% faster at M = 64 than 4 on both GPUs. block_m 128 (2 x 2 warps of 64 x 64)
// serves the compute-bound large M; 8 warps or 4 stages were 20-30% slower there.
// (perf/tools/gemm_pair_variants.sh rewrites these three lines to time other configs.)
template <int kBlockM, typename Element>
struct TileConfig;
template <typename E> struct TileConfig<16, E> { using Mainloop = MainloopSm80<E, 16, kGemmPairBlockN, 64, 4, 1, 4, 256>; };
template <typename E> struct TileConfig<64, E> { using Mainloop = MainloopSm80<E, 64, kGemmPairBlockN, 128, 3, 2, 4, 256>; };
template <typename E> struct TileConfig<128, E> { using Mainloop = MainloopSm80<E, 128, kGemmPairBlockN, 64, 3, 2, 2>; };

// The kernel of a mainloop config: its epilogue runs on the same threads and tile, and GEMM0's
// K-split has its own instantiation (gemm_pair_kernel.h says why).
template <typename Mainloop, bool kSplitK0>
using KernelFor = GemmPairKernel<Mainloop, Epilogue<typename Mainloop::Element, Mainloop::kBlockM, Mainloop::kBlockN,
                                                    Mainloop::kNThreads>,
                                 TicketScheduler, kSplitK0>;

template <typename Kernel>
auto prepared_kernel() {
  constexpr int kSmem = Kernel::kSmemBytes;
  auto kernel = &gemm_pair_kernel<Kernel>;
  if constexpr (kSmem > 48 * 1024) {
    static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
    smem_opt_in.apply(kernel, kSmem, "gemm_pair shared memory");
  }
  return kernel;
}

template <typename Mainloop>
void launch_gemm_pair(const GemmPairParams& p, cudaStream_t stream) {
  using Kernel = KernelFor<Mainloop, false>;
  using KernelSplitK0 = KernelFor<Mainloop, true>;
  static_assert(Kernel::kSmemBytes == KernelSplitK0::kSmemBytes);
  auto kernel = p.splits0 > 1 ? prepared_kernel<KernelSplitK0>() : prepared_kernel<Kernel>();
  kernel<<<p.num_tiles, Kernel::kNThreads, Kernel::kSmemBytes, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("gemm_pair launch");
}

}  // namespace gemm_pair

template <typename Element, int kBlockM>
void run_gemm_pair_(const GemmPairParams& p, cudaStream_t stream) {
  gemm_pair::launch_gemm_pair<typename gemm_pair::TileConfig<kBlockM, Element>::Mainloop>(p, stream);
}

// CTAs of this config that fit on one SM of the current device (the instantiation without GEMM0's
// K-split: the op asks before it picks the split, and caches the answer per device).
template <typename Element, int kBlockM>
int gemm_pair_ctas_per_sm_() {
  using Kernel = gemm_pair::KernelFor<typename gemm_pair::TileConfig<kBlockM, Element>::Mainloop, false>;
  int ctas = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, gemm_pair::prepared_kernel<Kernel>(),
                                                           Kernel::kNThreads, Kernel::kSmemBytes),
             "gemm_pair occupancy");
  return ctas;
}

}  // namespace cute_ops
