#pragma once
// The SM90 tile config per head dim and the launch of one instantiation
// (run_flash_fwd_sm90_<Element, kHeadDim, kIsCausal>), which the files under instantiations/
// compile one (dtype, head dim, causal) at a time. The TMA descriptors of q, k, v and out are
// encoded on the host at each call and travel in the kernel's argument, so a captured launch
// replays with them.
//
// Head dim 256's non-causal tile takes 80-key blocks (FlashFwdTileConfigSm90<256> below), one of
// the wgmma N that CuTe's selector offers only under CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
// (otherwise five instructions of N = 16). The macro must come before the first CuTe header, and
// it makes a file compile about 2.5x slower, so only that instantiation's file turns it on: the
// generated files say which instantiation they are (CUTE_OPS_INSTANCE_*) before including this
// header first. kernel_traits_sm90.h asserts the choice, so a file that needed it and lacks it
// fails to build.
#if defined(CUTE_OPS_INSTANCE_HEAD_DIM) && CUTE_OPS_INSTANCE_HEAD_DIM == 256 && !CUTE_OPS_INSTANCE_CAUSAL && \
    !defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
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
//       blocks, four stages (2 x Q 24 KB + O 24 KB + K 64 KB + V 64 KB); S 64, P 32 and O 32 a
//       thread in 160 registers. Two groups of 64 rows ran at 0.95-0.98x cuDNN on an H100. Some
//       causal calls of short queries take 128 rows and five stages (below).
// The others: two consumer groups of 64 rows, 24 registers a producer thread and 240 a consumer
// thread.
//   96: 128-key blocks, two stages (2 x Q 24 KB + O 24 KB + K 48 KB + V 48 KB; 64-byte swizzle
//       atoms, since a 192-byte row holds no whole 128-byte one); S 64 and O 48 floats a thread.
//   128: 128-key blocks, two stages (2 x Q 32 KB + O 32 KB + K 64 KB + V 64 KB); S and O 64 floats
//        a thread. (Three stages fit only with one Q buffer, O staged there: -10 to -18% at 512;
//        with that Q buffer given back after the tile's last S and O stored from the registers,
//        -3.5 to -5% at 2k and -13% at 512, session 58.)
//   256: 80-key blocks non-causal, 64 causal (below), two stages (Q 64 KB, O staged there + K and
//        V 80 or 64 KB each); O 128 and S 40 or 32 floats a thread.
template <int kHeadDim, typename Element, bool kIsCausal>
struct FlashFwdTileConfigSm90;
// The producer's 128 threads at 24 registers and the two consumer groups' 256 at 240: the
// 384-thread CTA's whole budget (flash_fwd_kernel_sm90.h asserts it). kQAhead: the producer hands
// the next tile's Q over early (flash_fwd_kernel_sm90.h); off unless a config measured a gain.
struct TwoConsumerRegisters {
  static constexpr int kLoadRegs = 24, kMmaRegs = 240;
  static constexpr bool kQAhead = false;
};
// The producer's 128 threads at 32 registers and three consumer groups' 384 at 160: the
// 512-thread CTA's whole budget.
struct ThreeConsumerRegisters {
  static constexpr int kLoadRegs = 32, kMmaRegs = 160;
  static constexpr bool kQAhead = false;
};
// Head dim 64's tile: query rows (192 on three consumer groups, or 128 on two as the other head
// dims) and K/V ring depth. Short queries starve for K/V: at 512 keys each (batch, head) has its
// own K and V, half of every tile's loads come from DRAM and the tensor pipe idles (ncu at
// B 32 x 512 causal: 46% L2 hits, the pipe 33% active against 58% at 16k). So the ring is deep:
// at 192 rows four stages take 201 KB with both Q buffers (two took 137 KB), at 128 rows five
// take 209 KB (kernel_traits_sm90.h's SharedStorage, barriers included). Four against two on an
// H200: +8.5% at 512 keys, +3.5% at 2k, +1% at 16k.
template <int kRows, int kStages, typename E>
struct FlashFwdD64ConfigSm90 : std::conditional_t<kRows == 192, ThreeConsumerRegisters, TwoConsumerRegisters> {
  static_assert(kRows == 192 || kRows == 128, "head dim 64 runs 192 rows on three consumer groups or 128 on two");
  using Traits = FlashFwdTraitsSm90<64, kRows, 128, kStages, E>;
};
// The general config's rows and stages, build knobs for A/B runs.
#ifndef CUTE_OPS_FLASH_FWD_SM90_D64_ROWS
#define CUTE_OPS_FLASH_FWD_SM90_D64_ROWS 192
#endif
#ifndef CUTE_OPS_FLASH_FWD_SM90_D64_STAGES
#define CUTE_OPS_FLASH_FWD_SM90_D64_STAGES 4
#endif
template <typename E, bool kIsCausal>
struct FlashFwdTileConfigSm90<64, E, kIsCausal>
    : FlashFwdD64ConfigSm90<CUTE_OPS_FLASH_FWD_SM90_D64_ROWS, CUTE_OPS_FLASH_FWD_SM90_D64_STAGES, E> {};
// Causal calls of up to this many queries take 128 rows and five stages where 192-row tiles would
// pad the queries by more than a sixteenth over 128-row ones (takes_short_causal_tile below); 0
// turns that off. On an H200 (TFLOP/s, bf16, 192 x 4 against 128 x 5): 512 queries 208-213
// against 226 (the 192-row tiles pad to 576), 768 276-286 against 270 (no padding), 1024 276 against
// 304 (1152), 1280 320 against 318 (1344), 1536 355 against 330, 2048 377 against 357, 16k 497
// against 439. Padding aside, 192 rows gain more the longer the queries, hence the cap.
#ifndef CUTE_OPS_FLASH_FWD_SM90_D64_SHORT_CAUSAL_MAX_Q
#define CUTE_OPS_FLASH_FWD_SM90_D64_SHORT_CAUSAL_MAX_Q 2048
#endif
inline bool takes_short_causal_tile(int seqlen_q) {
  const long rows_192 = (seqlen_q + 191L) / 192 * 192, rows_128 = (seqlen_q + 127L) / 128 * 128;
  return seqlen_q <= CUTE_OPS_FLASH_FWD_SM90_D64_SHORT_CAUSAL_MAX_Q && 16 * rows_192 > 17 * rows_128;
}
template <typename E>
using FlashFwdShortCausalConfigSm90 = FlashFwdD64ConfigSm90<128, 5, E>;
template <typename E, bool kIsCausal> struct FlashFwdTileConfigSm90<96, E, kIsCausal> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<96, 128, 128, 2, E>;
};
// Q ahead at 128 only, and for non-causal calls only (KernelSm90For). On an H200 (session 56, two
// rounds a build) +1.1% at 2k (bf16 and fp16) and 16k; at head dim 64 it lost 1.9% at 2k and 2.6%
// at 512 causal, whose tiles already wait 0.14 us for their Q against 0.85 us at 128; at 96 it
// gained at 512 only and lost 1.5% at 16k. Causal at 128 (session 57, two rounds a build, TFLOP/s
// with it / without): 8k 574, 575 / 606, 600; 16k 601, 598 / 625, 625; 2k and LLaMA-3-8B 4k and 8k
// even; the early claim unbalances the dynamic scheduler over causal tiles of unequal lengths
// (perf/tools/flash_fwd_schedule.py --claims). Claiming two blocks before a tile's loads end
// instead (a knob, since removed) recovered 8k and 16k as well but lost 1-1.5% at 2k.
template <typename E, bool kIsCausal> struct FlashFwdTileConfigSm90<128, E, kIsCausal> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<128, 128, 128, 2, E>;
  static constexpr bool kQAhead = true;
};
// Head dim 256's key blocks: 80 (FlashAttention-3's choice here; 224 KB with Q's buffer) against
// 64 on an H200 (session 58, two rounds a build, TFLOP/s, bf16 unless marked): 2k 649, 650 / 625,
// 625; 2k fp16 620, 610 / 605, 598; 8k 738, 736 / 691, 691; the fewer, longer blocks. Causal the
// other way: 2k 516, 528 / 534, 534; 512 fp16 304, 308 / 320, 335 (a 128-row diagonal crosses
// more 80-key blocks, each masked); 16k causal 715 / 709, 713. So 80 for non-causal calls only.
template <typename E, bool kIsCausal> struct FlashFwdTileConfigSm90<256, E, kIsCausal> : TwoConsumerRegisters {
  using Traits = FlashFwdTraitsSm90<256, 128, kIsCausal ? 64 : 80, 2, E>;
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
// Q ahead: -1 as each config says (kQAhead above), 0 nowhere, 1 wherever there are two Q buffers;
// causal calls only with Q_AHEAD_CAUSAL 1 (measured above: off by default).
#ifndef CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD
#define CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD -1
#endif
#ifndef CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD_CAUSAL
#define CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD_CAUSAL 0
#endif

template <typename Config, bool kIsCausal>
using KernelSm90For = FlashFwdKernelSm90<typename Config::Traits, kIsCausal, Config::kLoadRegs, Config::kMmaRegs,
                                         CUTE_OPS_FLASH_FWD_SM90_OVERLAP != 0, CUTE_OPS_FLASH_FWD_SM90_PINGPONG != 0,
                                         CUTE_OPS_FLASH_FWD_SM90_PERSISTENT != 0,
                                         (CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD < 0 ? Config::kQAhead
                                                                              : CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD != 0) &&
                                             (!kIsCausal || CUTE_OPS_FLASH_FWD_SM90_Q_AHEAD_CAUSAL != 0)>;

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
  if constexpr (kHeadDim == 64 && kIsCausal && CUTE_OPS_FLASH_FWD_SM90_D64_SHORT_CAUSAL_MAX_Q > 0) {
    if (flash::takes_short_causal_tile(p.seqlen_q)) {  // varlen: the caller's bound, max_seqlen_q
      flash::launch_flash_fwd_sm90<flash::KernelSm90For<flash::FlashFwdShortCausalConfigSm90<Element>, true>>(p, stream);
      return;
    }
  }
  flash::launch_flash_fwd_sm90<flash::KernelSm90For<flash::FlashFwdTileConfigSm90<kHeadDim, Element, kIsCausal>, kIsCausal>>(
      p, stream);
}

}  // namespace cute_ops
