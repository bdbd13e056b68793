#pragma once
// Tile choice per head dim and the launch of one instantiation (run_flash_fwd_<...>), which the
// files under instantiations/ compile one (dtype, head dim, causal) at a time.
#include "common/cuda_check.h"
#include "flash_fwd/flash_fwd_kernel.h"

namespace cute_ops {

namespace flash {

// (kBlockM, kBlockN, warps) per head dim. Shared memory = (kBlockM + 2 kBlockN) x d x 2 bytes.
template <int kHeadDim, typename Element>
struct FlashFwdTileConfig;
template <typename E> struct FlashFwdTileConfig<64, E> { using type = FlashFwdTraits<64, 128, 128, 4, E>; };
template <typename E> struct FlashFwdTileConfig<96, E> { using type = FlashFwdTraits<96, 128, 64, 4, E>; };
template <typename E> struct FlashFwdTileConfig<128, E> { using type = FlashFwdTraits<128, 256, 64, 8, E>; };
template <typename E> struct FlashFwdTileConfig<256, E> { using type = FlashFwdTraits<256, 128, 64, 8, E>; };

}  // namespace flash

template <typename Element, int kHeadDim, bool kIsCausal>
void run_flash_fwd_(const FlashFwdParams& p, cudaStream_t stream) {
  using Traits = typename flash::FlashFwdTileConfig<kHeadDim, Element>::type;
  constexpr int kSmem = Traits::kSmemBytes;
  auto kernel = &flash::flash_fwd_kernel<Traits, kIsCausal>;
  if constexpr (kSmem > 48 * 1024) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
               "flash_fwd shared memory");
  }
  const dim3 grid((p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, p.b, p.h);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("flash_fwd launch");
}

}  // namespace cute_ops
