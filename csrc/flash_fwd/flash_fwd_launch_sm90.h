#pragma once
// The SM90 tile config per head dim and the launch of one instantiation
// (run_flash_fwd_sm90_<Element, kHeadDim, kIsCausal>), which the files under instantiations/
// compile one (dtype, head dim, causal) at a time. The TMA descriptors of q, k, v and out are
// encoded on the host at each call and travel in the kernel's argument, so a captured launch
// replays with them.
#include <algorithm>
#include <type_traits>

#include "common/arrival_counters.h"
#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/kernel_attributes.h"
#include "flash_fwd/flash_fwd_kernel_sm90.h"
#include "flash_fwd/kernel_traits_sm90.h"
#include "flash_fwd/seq_info.h"

namespace cute_ops {

namespace flash {

// FlashFwdTraitsSm90<head dim, kBlockM, kBlockN, stages, element> and the register split, per
// head dim (docs/perf-notes.md, issue 16, has the measurements):
//   64: 192 query rows in three consumer groups (at this head dim the softmax costs about as
//       much as the GEMMs, so each group's softmax runs under two others' GEMMs), 128-key
//       blocks, two stages (2 x Q 24 KB + O 24 KB + K 32 KB + V 32 KB; the stages are a build
//       knob below); S 64, P 32 and O 32 a thread in 160 registers. Two groups of 64 rows ran at
//       0.95-0.98x cuDNN on an H100.
// The others: two consumer groups of 64 rows, 24 registers a producer thread and 240 a consumer
// thread.
//   96: 128-key blocks, two stages (2 x Q 24 KB + O 24 KB + K 48 KB + V 48 KB; 64-byte swizzle
//       atoms, since a 192-byte row holds no whole 128-byte one); S 64 and O 48 floats a thread.
//   128: 128-key blocks, two stages (2 x Q 32 KB + O 32 KB + K 64 KB + V 64 KB; the stages are a
//        build knob below); S and O 64 floats a thread.
//   256: 64-key blocks, two stages (Q 64 KB, O staged there + K 64 KB + V 64 KB); O 128 and S 32
//        floats a thread. (80-key blocks would fit too, but wgmma's N = 80 is one of CuTe's "extended"
//        shapes, off by default: the selector then took 5 instructions of N = 16.)
template <int kHeadDim, typename Element>
struct FlashFwdTileConfigSm90;
// The producer's 128 threads at 24 registers and the two consumer groups' 256 at 240: the
// 384-thread CTA's whole budget (flash_fwd_kernel_sm90.h asserts it).
struct TwoConsumerRegisters {
  static constexpr int kLoadRegs = 24, kMmaRegs = 240;
};
// The producer's 128 threads at 32 registers and three consumer groups' 384 at 160: the
// 512-thread CTA's whole budget.
struct ThreeConsumerRegisters {
  static constexpr int kLoadRegs = 32, kMmaRegs = 160;
};
// Head dim 64's query rows, a build knob for A/B runs (192, or 128 on two groups as the other
// head dims: the causal diagonal's waste is smaller there; docs/perf-notes.md).
#ifndef CUTE_OPS_FLASH_FWD_SM90_D64_ROWS
#define CUTE_OPS_FLASH_FWD_SM90_D64_ROWS 192
#endif
static_assert(CUTE_OPS_FLASH_FWD_SM90_D64_ROWS == 192 || CUTE_OPS_FLASH_FWD_SM90_D64_ROWS == 128);
// Head dim 64's K/V ring depth, a build knob for A/B runs: at 192 rows two stages take 136 KB of
// shared memory, four 201 KB with both Q buffers (five fit with one); at short lengths every tile's first blocks come from
// DRAM (ncu at B 32 x 512 causal: 46% L2 hits, the tensor pipe 33% active against 58% at 16k).
#ifndef CUTE_OPS_FLASH_FWD_SM90_D64_STAGES
#define CUTE_OPS_FLASH_FWD_SM90_D64_STAGES 2
#endif
template <typename E>
struct FlashFwdTileConfigSm90<64, E>
    : std::conditional_t<CUTE_OPS_FLASH_FWD_SM90_D64_ROWS == 192, ThreeConsumerRegisters, TwoConsumerRegisters> {
  using Traits = FlashFwdTraitsSm90<64, CUTE_OPS_FLASH_FWD_SM90_D64_ROWS, 128, CUTE_OPS_FLASH_FWD_SM90_D64_STAGES, E>;
};
template <typename E> struct FlashFwdTileConfigSm90<96, E> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<96, 128, 128, 2, E>;
};
// Head dim 128's K/V ring depth, a build knob for A/B runs: three stages (192 KB) leave room for
// one Q buffer with O staged in it (kernel_traits_sm90.h decides that from the budget) instead of
// two Q buffers and O's own; the short lengths starve for K/V as head dim 64's do (perf-notes,
// session 52), but step 8's second Q buffer gained 7% at 512. With one buffer the producer waits
// for a tile's O store before the next tile's Q and K/V loads (as at head dim 256), so an A/B of
// 3 against 2 measures the deeper ring and the lost cross-tile prefetch together.
#ifndef CUTE_OPS_FLASH_FWD_SM90_D128_STAGES
#define CUTE_OPS_FLASH_FWD_SM90_D128_STAGES 2
#endif
template <typename E> struct FlashFwdTileConfigSm90<128, E> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<128, 128, 128, CUTE_OPS_FLASH_FWD_SM90_D128_STAGES, E>;
};
template <typename E> struct FlashFwdTileConfigSm90<256, E> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<256, 128, 64, 2, E>;
};

// The schedule, build knobs for A/B runs (rebuild with e.g.
// NVCC_APPEND_FLAGS=-DCUTE_OPS_FLASH_FWD_SM90_OVERLAP=0; perf/tools/flash_fwd_variants.sh):
// OVERLAP issues the next block's S = Q K^T before this block's softmax (FlashAttention-3's
// intra-warpgroup pipelining); PINGPONG orders the two consumer groups' GEMMs so that one's
// softmax runs under the other's GEMMs; PERSISTENT runs a CTA per SM over many tiles
// (tile_scheduler_sm90.h) instead of a CTA per tile.
#ifndef CUTE_OPS_FLASH_FWD_SM90_OVERLAP
#define CUTE_OPS_FLASH_FWD_SM90_OVERLAP 1
#endif
#ifndef CUTE_OPS_FLASH_FWD_SM90_PINGPONG
#define CUTE_OPS_FLASH_FWD_SM90_PINGPONG 1
#endif
#ifndef CUTE_OPS_FLASH_FWD_SM90_PERSISTENT
#define CUTE_OPS_FLASH_FWD_SM90_PERSISTENT 1
#endif

template <typename Config, bool kIsCausal>
using KernelSm90For = FlashFwdKernelSm90<typename Config::Traits, kIsCausal, Config::kLoadRegs, Config::kMmaRegs,
                                         CUTE_OPS_FLASH_FWD_SM90_OVERLAP != 0, CUTE_OPS_FLASH_FWD_SM90_PINGPONG != 0,
                                         CUTE_OPS_FLASH_FWD_SM90_PERSISTENT != 0>;

template <typename Kernel>
void launch_flash_fwd_sm90(const FlashFwdParams& p, cudaStream_t stream) {
  constexpr int kSmem = Kernel::kSmemBytes;
  auto kernel = &flash_fwd_kernel_sm90<Kernel>;
  static DynamicSmemOptIn smem_opt_in;  // this instantiation's, set once per device
  smem_opt_in.apply(kernel, kSmem, "flash_fwd shared memory");
  if (p.cu_seqlens_q) {  // the offsets' checks and fills, which the kernel leaves to this one
    using Traits = typename Kernel::Traits;
    // x: CTAs sharing a (sequence, head)'s fills (rows of padding after the last sequence can be
    // many, in a graph's fixed buffer); a few, not one a query tile, since most calls fill nothing.
    const int fill_ctas = std::min((p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM, 8);
    varlen_checks_kernel<typename Traits::Element, Traits::kBlockM, Traits::kHeadDim, 128>
        <<<dim3(fill_ctas, p.b, p.h), 128, 0, stream>>>(p);
    CUTE_OPS_CHECK_LAUNCH("flash_fwd varlen checks launch");
  }
  int device = 0;
  check_cuda(cudaGetDevice(&device), "flash_fwd: current device");
  const typename Kernel::Params params = Kernel::make_params(p, arrival_counters(device, stream, 2));
  const dim3 grid = Kernel::Scheduler::grid(params.scheduler, device_info(device).sms);
  kernel<<<grid, Kernel::kNThreads, kSmem, stream>>>(params);
  CUTE_OPS_CHECK_LAUNCH("flash_fwd launch");
}

}  // namespace flash

template <typename Element, int kHeadDim, bool kIsCausal>
void run_flash_fwd_sm90_(const FlashFwdParams& p, cudaStream_t stream) {
  flash::launch_flash_fwd_sm90<flash::KernelSm90For<flash::FlashFwdTileConfigSm90<kHeadDim, Element>, kIsCausal>>(
      p, stream);
}

}  // namespace cute_ops
