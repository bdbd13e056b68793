#pragma once
// The tile config per block_m and the launch of one instantiation (run_gemm_pair_<Element,
// kBlockM>), which the files under instantiations/ compile one (dtype, block_m) at a time.
#include "common/cuda_check.h"
#include "common/kernel_attributes.h"
#include "gemm_pair/gemm_pair_kernel.h"

namespace cute_ops {

namespace gemm_pair {

// (block_m, block_k, stages, warps along M x N, L2 prefetch bytes; block_n is kGemmPairBlockN), measured on an H100
// and an H200 (docs/perf-notes.md, gemm_pair). block_m 16 and 64 serve decode-sized M, where tiles
// stream weights: what counts is the DRAM access pattern and the bytes in flight. A 256-byte L2
// prefetch (block_m 16) or 128-wide K tiles (block_m 64) read each weight row in 256-byte runs:
// 5-14% faster than 128-byte runs; deeper rings (6 stages) were slower. block_m 64 fits one CTA
// an SM, whose mma.sync issue then limits it: 8 warps (2 x 4, warp tile 32 x 32) were 5% faster
// at M = 64 than 4 on both GPUs. block_m 128 (2 x 2 warps of 64 x 64) serves the compute-bound
// large M; 8 warps or 4 stages were 20-30% slower there.
template <int kBlockM, typename Element>
struct TileConfig;
template <typename E> struct TileConfig<16, E> { using type = GemmPairTraits<16, 64, 4, 1, 4, E, 256>; };
template <typename E> struct TileConfig<64, E> { using type = GemmPairTraits<64, 128, 3, 2, 4, E, 256>; };
template <typename E> struct TileConfig<128, E> { using type = GemmPairTraits<128, 64, 3, 2, 2, E>; };

template <typename Traits, bool kSplitK0 = false>
auto prepared_kernel() {
  constexpr int kSmem = Traits::kSmemBytes;
  auto kernel = &gemm_pair_kernel<Traits, kSplitK0>;
  if constexpr (kSmem > 48 * 1024) {
    static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
    smem_opt_in.apply(kernel, kSmem, "gemm_pair shared memory");
  }
  return kernel;
}

template <typename Traits>
void launch_gemm_pair(const GemmPairParams& p, cudaStream_t stream) {
  // GEMM0's K-split has its own instantiation (gemm_pair_kernel.h says why).
  auto kernel = p.splits0 > 1 ? prepared_kernel<Traits, true>() : prepared_kernel<Traits, false>();
  kernel<<<p.num_tiles, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("gemm_pair launch");
}

}  // namespace gemm_pair

template <typename Element, int kBlockM>
void run_gemm_pair_(const GemmPairParams& p, cudaStream_t stream) {
  gemm_pair::launch_gemm_pair<typename gemm_pair::TileConfig<kBlockM, Element>::type>(p, stream);
}

// CTAs of this config that fit on one SM of the current device (the instantiation without GEMM0's
// K-split: the op asks before it picks the split, and caches the answer per device).
template <typename Element, int kBlockM>
int gemm_pair_ctas_per_sm_() {
  using Traits = typename gemm_pair::TileConfig<kBlockM, Element>::type;
  int ctas = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, gemm_pair::prepared_kernel<Traits>(),
                                                           Traits::kNThreads, Traits::kSmemBytes),
             "gemm_pair occupancy");
  return ctas;
}

}  // namespace cute_ops
