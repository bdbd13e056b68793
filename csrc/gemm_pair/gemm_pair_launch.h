#pragma once
// The tile config per block_m and the launch of one instantiation (run_gemm_pair_<Element,
// kBlockM>), which the files under instantiations/ compile one (dtype, block_m) at a time.
#include "common/cuda_check.h"
#include "gemm_pair/gemm_pair_kernel.h"

namespace cute_ops {

namespace gemm_pair {

// (block_m, block_n, block_k, stages, warps along M x N). block_m 16 and 64 serve decode-sized M,
// where tiles stream weights and the pipeline depth (bytes in flight an SM) is what counts:
// 16 x 128: 18 KB a stage, 4 stages, 3 CTAs an SM; 64 x 128: 24 KB a stage, 4 stages, 2 CTAs an
// SM. block_m 128 (2 x 2 warps of 64 x 64) serves the compute-bound large M.
template <int kBlockM, typename Element>
struct TileConfig;
template <typename E> struct TileConfig<16, E> { using type = GemmPairTraits<16, kGemmPairBlockN, 64, 4, 1, 4, E>; };
template <typename E> struct TileConfig<64, E> { using type = GemmPairTraits<64, kGemmPairBlockN, 64, 4, 2, 2, E>; };
template <typename E> struct TileConfig<128, E> { using type = GemmPairTraits<128, kGemmPairBlockN, 64, 3, 2, 2, E>; };

template <typename Traits>
void launch_gemm_pair(const GemmPairParams& p, cudaStream_t stream) {
  constexpr int kSmem = Traits::kSmemBytes;
  auto kernel = &gemm_pair_kernel<Traits>;
  if constexpr (kSmem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
               "gemm_pair shared memory");
  }
  kernel<<<p.num_tiles, Traits::kNThreads, kSmem, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("gemm_pair launch");
}

}  // namespace gemm_pair

template <typename Element, int kBlockM>
void run_gemm_pair_(const GemmPairParams& p, cudaStream_t stream) {
  gemm_pair::launch_gemm_pair<typename gemm_pair::TileConfig<kBlockM, Element>::type>(p, stream);
}

}  // namespace cute_ops
