#pragma once
// FlashAttention forward on SM90: a warp-specialised CTA per (kBlockM queries, batch, head), built
// from a mainloop (mainloop_sm90.h), an epilogue (epilogue_sm90.h) and a tile scheduler
// (tile_scheduler_sm90.h), each its own type as in CUTLASS 3.
//   - warp group 0, the producer: gives most of its registers to the consumers (setmaxnreg);
//     one thread issues the TMA loads of Q, K and V.
//   - warp groups 1.., the consumers, 64 query rows each: wgmma, online softmax, epilogue.
// Padded and varlen layouts alike: TMA addresses a varlen sequence from its first packed row
// (tma_layout.h), and the epilogue stores only its rows.
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>

#include "common/cute/online_softmax.h"
#include "flash_fwd/epilogue_sm90.h"
#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/mainloop_sm90.h"
#include "flash_fwd/seq_info.h"
#include "flash_fwd/tile_scheduler_sm90.h"

namespace cute_ops::flash {

using namespace cute;

// kLoadRegs / kMmaRegs: registers a thread of the producer / consumer warp groups keeps after
// the reallocation; kOverlap / kPingPong: the consumers' schedule (MainloopSm90::mma).
template <typename Traits_, bool kIsCausal_, int kLoadRegs_, int kMmaRegs_, bool kOverlap, bool kPingPong>
struct FlashFwdKernelSm90 {
  using Traits = Traits_;
  static constexpr bool kIsCausal = kIsCausal_;
  static constexpr int kLoadRegs = kLoadRegs_, kMmaRegs = kMmaRegs_;
  static constexpr int kNThreads = Traits::kNThreads, kLoadThreads = Traits::kLoadThreads;
  static constexpr int kMmaThreads = Traits::kMmaThreads;
  // setmaxnreg moves registers within what the CTA was launched with: kNThreads x the per-thread
  // cap that __launch_bounds__(kNThreads, 1) leaves (a multiple of 8). Asking for more would make
  // the consumers' increase wait forever.
  static_assert(kLoadThreads * kLoadRegs + kMmaThreads * kMmaRegs <= kNThreads * ((65536 / kNThreads) & ~7));
  using Mainloop = MainloopSm90<Traits, kIsCausal, kOverlap, kPingPong>;
  using Epilogue = EpilogueSm90<Traits>;
  using Scheduler = StaticTileScheduler<Traits::kBlockM, kIsCausal>;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kSmemBytes = Traits::kSmemBytes;

  struct Params {
    FlashFwdParams p;
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
  };

  static Params make_params(const FlashFwdParams& p) {
    return {p, Mainloop::make_params(p), Epilogue::make_params(p)};
  }

  __device__ __forceinline__ void operator()(const Params& params, char* smem) const {
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem);
    const FlashFwdParams& p = params.p;
    const ForwardTile t = Scheduler::tile();
    // Varlen: this sequence's offsets are checked before anything of it is read (seq_info.h); a
    // bad one is skipped here and reported, its rows filled, by varlen_checks_kernel, launched
    // before this kernel. A CTA with nothing to do leaves before the barriers are set up, all its
    // threads alike.
    if (p.cu_seqlens_q != nullptr && varlen_sequence_check(p, t.bidb).code != DeviceErrorCode{}) return;
    const SeqInfo seq(p, t.bidb);
    if (t.m_block * Traits::kBlockM >= seq.seqlen_q) return;  // varlen: a sequence shorter than the grid
    const bool is_producer = threadIdx.x < kLoadThreads;

    typename Traits::Pipeline::Params pipeline_params;
    pipeline_params.transaction_bytes = Traits::kKVBytes;
    pipeline_params.role = is_producer ? Traits::Pipeline::ThreadCategory::Producer
                                       : Traits::Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = threadIdx.x == 0;  // the thread that issues the loads
    pipeline_params.num_consumers = kMmaThreads;
    typename Traits::Pipeline pipeline_k(storage.pipeline_k, pipeline_params, Shape<_1, _1, _1>{});
    typename Traits::Pipeline pipeline_v(storage.pipeline_v, pipeline_params, Shape<_1, _1, _1>{});
    if (threadIdx.x == 0) {
      cutlass::arch::ClusterTransactionBarrier::init(&storage.q_full, 1);
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();  // every thread sees the initialised barriers

    const typename Mainloop::Blocks blocks(t.m_block, seq.seqlen_q, seq.seqlen_k);
    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegs>();
      if (threadIdx.x == 0 && blocks.n_max > 0) {
        Mainloop::prefetch_descriptors(params.mainloop);
        auto write = cutlass::make_producer_start_state<typename Traits::Pipeline>();
        Mainloop::load(params.mainloop, p, seq, t.m_block, t.bidb, t.bidh, blocks, pipeline_k, pipeline_v, write,
                       storage);
      }
      return;
    }
    cutlass::arch::warpgroup_reg_alloc<kMmaRegs>();
    const int thread = threadIdx.x - kLoadThreads;
    if (blocks.n_max <= 0) {  // no query of this tile sees a key
      Epilogue::store_empty(p, seq, t.m_block, t.bidb, t.bidh, thread);
      return;
    }
    typename Traits::TiledMmaO tiled_mma_o;
    Tensor tOrO = partition_fragment_C(tiled_mma_o, Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{});
    OnlineSoftmax<2 * decltype(size<1>(tOrO))::value> softmax;
    Mainloop::init_turns(thread);
    Mainloop::mma(p, t.m_block, seq.seqlen_q, seq.seqlen_k, blocks, pipeline_k, pipeline_v, tOrO, softmax, thread,
                  storage);
    Epilogue::store(params.epilogue, p, seq, t.m_block, t.bidb, t.bidh, tOrO, softmax, thread, storage);
  }
};

template <typename Kernel>
__global__ void __launch_bounds__(Kernel::kNThreads, 1)
    flash_fwd_kernel_sm90(const __grid_constant__ typename Kernel::Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char smem[];
  Kernel{}(params, smem);
#endif
}

}  // namespace cute_ops::flash
