#pragma once
// FlashAttention forward on SM90: a warp-specialised CTA over tiles of (kBlockM queries, batch,
// head), one or many (the scheduler's choice), built from a mainloop (mainloop_sm90.h), an
// epilogue (epilogue_sm90.h) and a tile scheduler (tile_scheduler_sm90.h), each its own type as
// in CUTLASS 3.
//   - warp group 0, the producer: gives most of its registers to the consumers (setmaxnreg);
//     one thread issues the TMA loads of Q, K and V.
//   - warp groups 1.., the consumers, 64 query rows each: wgmma, online softmax, epilogue.
// Padded and varlen layouts alike: TMA addresses a varlen sequence from its first packed row
// (tma_layout.h), and the epilogue stores only its rows.
#include <type_traits>

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
#include "flash_fwd/trace_sm90.h"

// Q ahead (kQAheadWanted, chosen per config in flash_fwd_launch_sm90.h): the producer hands a
// tile's Q over while it loads the tile before it, once that tile's first kStages K/V blocks are
// issued, instead of after that tile's last block; and claims the tile from the scheduler one tile
// ahead, so that the claim's round trip (an atomic on the dynamic scheduler's counter) runs under
// the loads. Only with two Q buffers: with one, the next Q waits for this tile's epilogue. (ptxas
// spills 24-100 bytes in the producer's path under it, which has 24 or 32 registers a thread.)
// A claim made at a tile's start assigns the next tile by when CTAs start tiles, not by when they
// finish them: with causal tiles of unequal lengths the dynamic scheduler balances less well, so
// causal kernels go without it (flash_fwd_launch_sm90.h has the measurements).

namespace cute_ops::flash {

using namespace cute;

// kLoadRegs / kMmaRegs: registers a thread of the producer / consumer warp groups keeps after
// the reallocation; kOverlap / kPingPong: the consumers' schedule (MainloopSm90::mma);
// kPersistent: the tile scheduler (tile_scheduler_sm90.h); kQAheadWanted: Q ahead (above).
template <typename Traits_, bool kIsCausal_, int kLoadRegs_, int kMmaRegs_, bool kOverlap, bool kPingPong,
          bool kPersistent, bool kQAheadWanted>
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
  using Scheduler =
      std::conditional_t<kPersistent, DynamicTileScheduler<kIsCausal>, StaticTileScheduler<kIsCausal>>;
  using SharedStorage = typename Traits::SharedStorage;
  static constexpr int kSmemBytes = Traits::kSmemBytes;
  static constexpr bool kQAhead = kQAheadWanted && Traits::kQStages >= 2;

  struct Params {
    FlashFwdParams p;
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    TileSchedulerParams scheduler;
  };

  // counters: two zeroed ints of the launch's stream (arrival_counters.h), for the scheduler.
  static Params make_params(const FlashFwdParams& p, int* counters) {
    return {p, Mainloop::make_params(p), Epilogue::make_params(p),
            tile_scheduler_params<Traits::kBlockM>(p, Traits::kHeadDim, sizeof(typename Traits::Element), kIsCausal,
                                                  counters)};
  }

  __device__ __forceinline__ void operator()(const Params& params, char* smem) const {
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem);
    const FlashFwdParams& p = params.p;
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
      for (int stage = 0; stage < Traits::kQStages; ++stage) {
        cutlass::arch::ClusterTransactionBarrier::init(&storage.q_full[stage], 1);
        cutlass::arch::ClusterBarrier::init(&storage.q_empty[stage], kMmaThreads);
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();  // every thread sees the initialised barriers

    // The producer picks the tiles and hands each to the consumers with its Q: the tile's number
    // and its decoded coordinates go into the Q buffer's tile_idx and tile_coord slots before the
    // arrival on q_full, and a number >= tiles ends the consumers' loop. Tiles with no queries are
    // skipped there; a tile whose queries see no key (n_max <= 0) is handed over with no Q (a
    // plain arrival), for store_empty.
    const TileSchedulerParams& sched = params.scheduler;
    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegs>();
      if (threadIdx.x != 0) return;
      Mainloop::prefetch_descriptors(params.mainloop);
      auto write = cutlass::make_producer_start_state<typename Traits::Pipeline>();
      if constexpr (kQAhead) {
        produce_q_ahead(params, pipeline_k, pipeline_v, write, storage);
        return;
      }
      int idx = Scheduler::first(sched);
      for (int q_loads = 0;; ++q_loads) {
        while (idx < sched.tiles && !has_queries(p, Scheduler::tile(sched, idx))) idx = Scheduler::next(sched, idx);
        const typename Traits::QSlot q_slot(q_loads);
        if (q_loads >= Traits::kQStages) {  // the buffer's previous tile, kQStages ago, is done with
          cutlass::arch::ClusterBarrier::wait(&storage.q_empty[q_slot.stage], q_slot.phase ^ 1);
        }
        storage.tile_idx[q_slot.stage] = idx;
        if (idx >= sched.tiles) {
          cutlass::arch::ClusterBarrier::arrive(&storage.q_full[q_slot.stage]);
          break;
        }
        const ForwardTile t = Scheduler::tile(sched, idx);
        storage.tile_coord[q_slot.stage][0] = t.m_block;  // before the arrival, as tile_idx
        storage.tile_coord[q_slot.stage][1] = t.bidb;
        storage.tile_coord[q_slot.stage][2] = t.bidh;
        const SeqInfo seq(p, t.bidb);
        const typename Mainloop::Blocks blocks(t.m_block, seq.seqlen_q, seq.seqlen_k);
        if (blocks.n_max > 0) {
          Mainloop::load(params.mainloop, p, seq, t.m_block, t.bidb, t.bidh, blocks, pipeline_k, pipeline_v, write,
                         q_slot, storage);
        } else {
          cutlass::arch::ClusterBarrier::arrive(&storage.q_full[q_slot.stage]);
        }
        idx = Scheduler::next(sched, idx);
      }
      Scheduler::finish(sched);
      return;
    }
    cutlass::arch::warpgroup_reg_alloc<kMmaRegs>();
    const int thread = threadIdx.x - kLoadThreads;
    Mainloop::init_turns(thread);
    typename Traits::PipelineState read_k{}, read_v{};
    for (int q_reads = 0;; ++q_reads) {
      const typename Traits::QSlot q_slot(q_reads);
      cutlass::arch::ClusterTransactionBarrier::wait(&storage.q_full[q_slot.stage], q_slot.phase);
      FWD_TRACE(q_reads, thread, 0);  // (probes: trace_sm90.h; 0: the tile's Q has landed)
      const int idx = storage.tile_idx[q_slot.stage];
      if (idx >= sched.tiles) break;
      const int* coord = storage.tile_coord[q_slot.stage];  // decoded by the producer
      const ForwardTile t{coord[0], coord[1], coord[2]};
      const SeqInfo seq(p, t.bidb);
      const typename Mainloop::Blocks blocks(t.m_block, seq.seqlen_q, seq.seqlen_k);
      if (blocks.n_max <= 0) {  // no query of this tile sees a key
        Epilogue::store_empty(p, seq, t.m_block, t.bidb, t.bidh, thread);
        cutlass::arch::ClusterBarrier::arrive(&storage.q_empty[q_slot.stage]);
        continue;
      }
      typename Traits::TiledMmaO tiled_mma_o;
      Tensor tOrO = partition_fragment_C(tiled_mma_o, Shape<Int<Traits::kBlockM>, Int<Traits::kHeadDim>>{});
      OnlineSoftmax<2 * decltype(size<1>(tOrO))::value> softmax;
      Mainloop::mma(p, t.m_block, seq.seqlen_q, seq.seqlen_k, blocks, pipeline_k, pipeline_v, read_k, read_v,
                    q_slot, tOrO, softmax, thread, storage,
                    [&] { FWD_TRACE(q_reads, thread, 1); });  // the first S issued
      FWD_TRACE(q_reads, thread, 2);  // the last P V complete
      // Every wgmma reading this Q has completed; with O staged elsewhere, its buffer may take
      // another Q now (otherwise the epilogue arrives once the store has read O out of it).
      if constexpr (Traits::kSeparateO) cutlass::arch::ClusterBarrier::arrive(&storage.q_empty[q_slot.stage]);
      Epilogue::store(params.epilogue, p, seq, t.m_block, t.bidb, t.bidh, tOrO, softmax, thread, storage);
      FWD_TRACE(q_reads, thread, 3);  // the epilogue done
    }
    Epilogue::finish(thread);
  }

 private:
  // The producer's loop under kQAhead. hand_over(n, idx) gives the n-th Q buffer tile idx: its
  // number and coordinates, and its Q (a plain arrival for a tile that sees no key or for the end
  // mark idx >= tiles). Tile n + 1 is handed over from inside tile n's K/V loads, after their
  // first fill of the rings. Its buffer is tile n - 1's, freed by that tile's last P V: every
  // load tile n - 1 and the start of tile n need is issued by then, so the wait for the buffer
  // cannot deadlock, and it ends before the rings have room again (that takes tile n's first S),
  // so it holds no load back either.
  template <typename Pipeline, typename PipelineState>
  __device__ static void produce_q_ahead(const Params& params, Pipeline& pipeline_k, Pipeline& pipeline_v,
                                         PipelineState& write, SharedStorage& storage) {
    const FlashFwdParams& p = params.p;
    const TileSchedulerParams& sched = params.scheduler;
    auto skip_empty = [&](int& idx) {
      while (idx < sched.tiles && !has_queries(p, Scheduler::tile(sched, idx))) idx = Scheduler::next(sched, idx);
    };
    auto hand_over = [&](int n, int idx) {
      const typename Traits::QSlot q_slot(n);
      if (n >= Traits::kQStages) cutlass::arch::ClusterBarrier::wait(&storage.q_empty[q_slot.stage], q_slot.phase ^ 1);
      storage.tile_idx[q_slot.stage] = idx;
      if (idx < sched.tiles) {
        const ForwardTile t = Scheduler::tile(sched, idx);
        storage.tile_coord[q_slot.stage][0] = t.m_block;  // before the arrival, as tile_idx
        storage.tile_coord[q_slot.stage][1] = t.bidb;
        storage.tile_coord[q_slot.stage][2] = t.bidh;
        const SeqInfo seq(p, t.bidb);
        if (typename Mainloop::Blocks(t.m_block, seq.seqlen_q, seq.seqlen_k).n_max > 0) {
          Mainloop::load_q(params.mainloop, p, seq, t.m_block, t.bidb, t.bidh, q_slot, storage);
          return;
        }
      }
      cutlass::arch::ClusterBarrier::arrive(&storage.q_full[q_slot.stage]);
    };
    int idx = Scheduler::first(sched);
    skip_empty(idx);
    hand_over(0, idx);
#pragma unroll 1
    for (int n = 0; idx < sched.tiles; ++n) {
      int upcoming = Scheduler::next(sched, idx);  // claimed now, read once this tile's first loads are out
      auto hand_over_next = [&] {
        skip_empty(upcoming);
        hand_over(n + 1, upcoming);
      };
      const ForwardTile t = Scheduler::tile(sched, idx);
      const SeqInfo seq(p, t.bidb);
      const typename Mainloop::Blocks blocks(t.m_block, seq.seqlen_q, seq.seqlen_k);
      if (blocks.n_max > 0) {
        Mainloop::load_kv(params.mainloop, p, seq, t.bidb, t.bidh, blocks, pipeline_k, pipeline_v, write, storage,
                          hand_over_next);
      } else {
        hand_over_next();
      }
      idx = upcoming;
    }
    Scheduler::finish(sched);
  }

  // Whether tile t has queries to compute (the producer's filter). Varlen: the sequence's
  // offsets are checked before anything of it is read (seq_info.h); a bad one is skipped here and
  // reported, its rows filled, by varlen_checks_kernel, launched before this kernel; and a
  // sequence shorter than the longest has fewer query tiles than the scheduler numbers.
  __device__ static bool has_queries(const FlashFwdParams& p, const ForwardTile& t) {
    if (p.cu_seqlens_q != nullptr && varlen_sequence_check(p, t.bidb).code != DeviceErrorCode{}) return false;
    return t.m_block * Traits::kBlockM < SeqInfo(p, t.bidb).seqlen_q;
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
