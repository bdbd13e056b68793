#pragma once
// Tile choice per head dim and the launch of one instantiation (run_flash_fwd_<...>), which the
// files under instantiations/ compile one (dtype, head dim, causal) at a time.
#include "common/cuda_check.h"
#include "common/kernel_attributes.h"
#include "flash_fwd/flash_fwd_kernel.h"

#include <type_traits>

namespace cute_ops {

namespace flash {

// (kBlockM, kBlockN, warps) per head dim. Shared memory = (kBlockM + 2 kBlockN) x d x 2 bytes.
// Measured on H100/H200 against FlashAttention-2 (docs/perf-notes.md).
template <int kHeadDim, typename Element>
struct FlashFwdTileConfig;
template <typename E> struct FlashFwdTileConfig<64, E> { using type = FlashFwdTraits<64, 128, 128, 4, E>; };
template <typename E> struct FlashFwdTileConfig<96, E> { using type = FlashFwdTraits<96, 128, 64, 4, E>; };
template <typename E> struct FlashFwdTileConfig<128, E> { using type = FlashFwdTraits<128, 128, 64, 4, E>; };
template <typename E> struct FlashFwdTileConfig<256, E> { using type = FlashFwdTraits<256, 128, 64, 8, E>; };

// Long non-causal attention at head dim 128 runs 256-row tiles on 8 warps: every warp still holds
// 32 rows (the same registers), but each K/V tile brought into shared memory serves twice the
// queries, halving the L2 -> SM traffic (+4-8% at seqlen_k >= 2k). With causal masking or short
// keys the 256-row tile loses (coarser diagonal, fewer and longer CTAs), so those keep 128 rows.
template <int kHeadDim, typename Element>
struct FlashFwdTallTileConfig { using type = void; };
template <typename E> struct FlashFwdTallTileConfig<128, E> { using type = FlashFwdTraits<128, 256, 64, 8, E>; };
constexpr int kTallTileMinSeqlenK = 2048;

template <typename Traits, bool kIsCausal>
void launch_flash_fwd(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr int kSmem = Traits::kSmemBytes;
  auto kernel = &flash_fwd_kernel<Traits, kIsCausal>;
  if constexpr (kSmem > 48 * 1024) {
    static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
    smem_opt_in.apply(kernel, kSmem, "flash_fwd shared memory");
  }
  const dim3 grid((p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, p.b, p.h);
  kernel<<<grid, Traits::kNThreads, kSmem, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("flash_fwd launch");
}

}  // namespace flash

template <typename Element, int kHeadDim, bool kIsCausal>
void run_flash_fwd_(const FlashFwdParams& p, cudaStream_t stream) {
  using Tall = typename flash::FlashFwdTallTileConfig<kHeadDim, Element>::type;
  if constexpr (!kIsCausal && !std::is_void_v<Tall>) {
    if (p.seqlen_k >= flash::kTallTileMinSeqlenK) return flash::launch_flash_fwd<Tall, kIsCausal>(p, stream);
  }
  flash::launch_flash_fwd<typename flash::FlashFwdTileConfig<kHeadDim, Element>::type, kIsCausal>(p, stream);
}

}  // namespace cute_ops
