#pragma once
// gemm_pair on SM90: the same tiles, tickets and signals as the SM80 kernel (gemm_pair_kernel.h
// says which GEMM1 tile waits for which GEMM0 tiles), computed by persistent warp-specialised CTAs:
//   - warp group 0, the producer: one elected thread takes a ticket, hands its tile to the
//     consumers through a work queue (mbarriers; two slots, one where the staging tile shares the
//     ring: 128- and 256-row tiles), and issues
//     the tile's TMA loads into the ring (MainloopSm90::load); then the next ticket, until the
//     tickets run out. For a GEMM1 tile it issues the weights' first stages, then waits for the h
//     columns the tile reads, then loads h. Its registers are handed to the consumers.
//   - warp groups 1.., the consumers: per tile from the queue, wgmma over the ring (CUTLASS's
//     collective), then the epilogue of epilogue.h over a named barrier of their own threads,
//     then the signal. While they run a tile's epilogue the producer already loads the next tile
//     (with 128- and 256-row tiles, whose staging tile shares the ring's shared memory, only
//     where the tile's epilogue runs from the registers: CUTE_OPS_GEMM_PAIR_SM90_REGISTER_EPILOGUE).
//   - with CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP (256-row tiles, off by default), one thread of the
//     producer warp group's warp 1: it stores the h tiles the consumers leave in a shared-memory
//     buffer and signals them (h_store_sm90.h).
// h is stored by ordinary stores and loaded by TMA (the async proxy) in the same launch: writers
// fence the proxies before their release, the reader after its acquire (tile_sync.h).
//
// The grid is one CTA per SM slot (fewer when there are fewer tiles). A ticket is taken by a CTA
// that runs, and a CTA's consumers finish its earlier tiles with loads already issued, so the
// launch cannot deadlock for the SM80 kernel's reason (docs/gemm_pair.md): the producer's wait
// for h blocks only the loads of the later tile it holds.
#include <cute/tensor.hpp>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "common/pdl.h"
#include "gemm_pair/epilogue.h"
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/h_store_sm90.h"
#include "gemm_pair/tile_scheduler.h"
#include "gemm_pair/tile_sync.h"
#include "gemm_pair/trace.h"

// 1 (the default since session 60): tiles not split along K stored from the accumulators'
// registers (Epilogue::store_h_registers), releasing the shared memory to the next tile's loads
// before their epilogue; measured 1.6-5% faster at M = 128-8192 on an H200 and tie or faster on an
// H100 (docs/perf-notes.md, session 59). 0: every tile through the staging tile, kept for A/B runs:
// rebuild with NVCC_APPEND_FLAGS=-DCUTE_OPS_GEMM_PAIR_SM90_REGISTER_EPILOGUE=0, its objects removed
// first (the flag is not part of the build's command lines).
#ifndef CUTE_OPS_GEMM_PAIR_SM90_REGISTER_EPILOGUE
#define CUTE_OPS_GEMM_PAIR_SM90_REGISTER_EPILOGUE 1
#endif

// The vectors a consumer thread sums at once in a split-K reduction (Epilogue's kSumUnroll); a
// knob for A/B runs like the one above (8 measured 1-2% faster at M = 512-1024 but spills).
#ifndef CUTE_OPS_GEMM_PAIR_SM90_SUM_UNROLL
#define CUTE_OPS_GEMM_PAIR_SM90_SUM_UNROLL 4
#endif

// 1 (the default since session 61): GEMM1's K-splits folded in split order into one running sum
// from the accumulators (Epilogue::fold_split); measured 2-7% faster at M = 16-1024 on an H200
// (the launch's tail: docs/perf-notes.md, session 61). 0: every split publishes its partial
// through the staging tile and the last sums them all (Epilogue::reduce_splits), kept for A/B
// runs like the knobs above. Needs the register epilogue.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_FOLD_SPLITS
#define CUTE_OPS_GEMM_PAIR_SM90_FOLD_SPLITS 1
#endif

// 1: with folded splits (above) at 64- and 128-row tiles and 3 splits or more, the next-to-last
// split of an output tile stores its own partial instead of folding, and the last split adds both
// (Epilogue::fold_split's kPairLast: the same bits), so that the two folds do not run one after
// the other at the launch's end. 0: the plain chain. On by default: on an H200 it took 0.6% off
// M = 16 and 0.8% off M = 64 (docs/perf-notes.md, session 63).
#ifndef CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR
#define CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR 1
#endif

// N > 0: the kernel is launched as a programmatic dependent of the stream's previous kernel
// (common/pdl.h), so that its CTAs start on the SMs that kernel's tail leaves idle; before waiting
// for that kernel each CTA prefetches into L2 the first N K tiles of the weights of the tile its
// block index names in the order (its first ticket's, if tickets go in block order: a guess, and a
// hint only); every thread waits before its first global access other than those reads. 0: an
// ordinary launch. A knob for A/B runs like the ones above.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_PDL
#define CUTE_OPS_GEMM_PAIR_SM90_PDL 16
#endif

// 1: at 256-row tiles, a SwiGLU GEMM0 tile stored from the registers hands its h to a store warp
// (h_store_sm90.h: the consumers write it into a 32 KB buffer beside the ring, a spare producer
// warp stores it by TMA and signals it), so that the consumers start their next tile without
// waiting on the stores. 0: the consumers store h themselves (store_h_registers). Off until
// measured; a knob for A/B runs like the ones above.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP
#define CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP 0
#endif

namespace cute_ops::gemm_pair {

using namespace cute;

// The SM90 kernel's argument: the SM80 kernel's params, and each GEMM's TMA descriptors (the
// same type for both instantiations of a mainloop, with and without GEMM0's K-split).
template <typename Mainloop, typename HStoreParams = NoHStore>
struct GemmPairParamsSm90 {
  GemmPairParams p;
  typename Mainloop::Params gemm[2];  // GEMM0: a x b0, GEMM1: h x b1
  HStoreParams store_h;               // the store warp's TMA descriptor of h
};
template <typename Mainloop>
struct GemmPairParamsSm90<Mainloop, NoHStore> {  // without the store warp
  GemmPairParams p;
  typename Mainloop::Params gemm[2];
};

// kLoadRegs / kMmaRegs: registers a thread of the producer / consumer warp groups keeps after
// the reallocation (setmaxnreg); kCtasPerSm: the occupancy they are sized for.
template <typename Mainloop_, bool kSplitK0_, int kLoadRegs_, int kMmaRegs_, int kCtasPerSm_>
struct GemmPairKernelSm90 {
  using Mainloop = Mainloop_;
  static constexpr bool kSplitK0 = kSplitK0_;
  static constexpr int kLoadRegs = kLoadRegs_, kMmaRegs = kMmaRegs_, kCtasPerSm = kCtasPerSm_;
  using Element = typename Mainloop::Element;
  static constexpr int kBlockM = Mainloop::kBlockM, kBlockN = Mainloop::kBlockN, kBlockK = Mainloop::kBlockK;
  static constexpr int kLoadThreads = 128;
  static constexpr int kMmaThreads = Mainloop::kMmaThreads;
  static constexpr int kNThreads = kLoadThreads + kMmaThreads;
  static_assert(kLoadThreads * kLoadRegs + kMmaThreads * kMmaRegs <= 65536 / kCtasPerSm);

  using Epilogue =
      gemm_pair::Epilogue<Element, kBlockM, kBlockN, kMmaThreads, kLoadThreads, CUTE_OPS_GEMM_PAIR_SM90_SUM_UNROLL>;
  using MmaBarrier = NamedBarrier<1, kMmaThreads, kLoadThreads>;
  // Up to this many row blocks the weights' loads are marked evict-first in L2 (MainloopSm90::load):
  // measured on an H200, one and two row blocks gained (M = 64 103.8 -> 98.1 us; M = 256 and 512,
  // two row blocks, 3-6%); at 8 row blocks and more (M >= 2048), where a weight tile's row blocks
  // come a column group apart, evict-first everywhere lost 2-3% (docs/perf-notes.md, session 38).
  static constexpr int kEvictFirstRowBlocks = 2;
  static constexpr bool kRegisterEpilogue = CUTE_OPS_GEMM_PAIR_SM90_REGISTER_EPILOGUE != 0;
  static constexpr bool kFoldSplits = kRegisterEpilogue && CUTE_OPS_GEMM_PAIR_SM90_FOLD_SPLITS != 0;
  static constexpr bool kFoldPair = kFoldSplits && CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR != 0 && kBlockM <= 128;
  static constexpr int kPdlPrefetch = CUTE_OPS_GEMM_PAIR_SM90_PDL;  // K tiles; 0: no PDL
  static constexpr bool kStoreWarp = CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP != 0 && kBlockM == 256 && kRegisterEpilogue;
  using HStore = HStoreSm90<Element, kBlockM, kBlockN / 2>;

  // The ring and the staging tile have shared memory apart when both fit (the next tile loads
  // during an epilogue); otherwise they share it, and the producer takes the next ticket only
  // once the consumers are done with the staging tile (a one-slot queue, released after the
  // epilogue; at once for a tile that does not use the staging tile, epilogue_in_registers).
  static constexpr int kSmemLimit = 227 * 1024 - 512;
  static constexpr bool kOverlapEpilogue =
      sizeof(typename Mainloop::TensorStorage) + sizeof(typename Epilogue::SharedStorage) + 1024 <= kSmemLimit;
  // The ticket entry of each tile the producer has taken and the consumers have not yet read.
  using WorkQueue = cutlass::PipelineAsync<kOverlapEpilogue ? 2 : 1>;

  struct StorageApart {
    typename Mainloop::TensorStorage ring;
    typename Epilogue::SharedStorage epilogue;
    typename Mainloop::PipelineStorage pipeline;
    typename WorkQueue::SharedStorage queue;
    int4 work[2];
    int ticket[2];  // each entry's ticket (the trace probes' slot)
  };
  struct StorageShared {
    union {
      typename Mainloop::TensorStorage ring;
      typename Epilogue::SharedStorage epilogue;
    };
    typename Mainloop::PipelineStorage pipeline;
    typename WorkQueue::SharedStorage queue;
    int4 work[2];
    int ticket[2];  // each entry's ticket (the trace probes' slot)
  };
  struct StorageSharedWithHStore {  // StorageShared and the store warp's buffer (kStoreWarp)
    union {
      typename Mainloop::TensorStorage ring;
      typename Epilogue::SharedStorage epilogue;
    };
    typename HStore::SharedStorage h_store;  // right after the ring, on its 1024-byte swizzle alignment
    typename Mainloop::PipelineStorage pipeline;
    typename WorkQueue::SharedStorage queue;
    int4 work[2];
    int ticket[2];
  };
  static_assert(!(kStoreWarp && kOverlapEpilogue), "the store warp is for the configs whose staging tile shares the ring");
  using SharedStorage = std::conditional_t<kOverlapEpilogue, StorageApart,
                                           std::conditional_t<kStoreWarp, StorageSharedWithHStore, StorageShared>>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage));  // dynamic shared memory
  static_assert(kSmemBytes <= kSmemLimit, "the tile config's shared memory exceeds an SM's");

  using Params = GemmPairParamsSm90<Mainloop, std::conditional_t<kStoreWarp, typename HStore::Params, NoHStore>>;

  __device__ __forceinline__ void operator()(const Params& params, char* smem) const {
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem);
    const bool is_producer = threadIdx.x < kLoadThreads;

    typename Mainloop::Pipeline::Params pipeline_params;
    pipeline_params.transaction_bytes = Mainloop::transaction_bytes(params.gemm[0]);  // both GEMMs' A have m rows
    pipeline_params.role = is_producer ? Mainloop::Pipeline::ThreadCategory::Producer
                                       : Mainloop::Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = threadIdx.x == 0;
    pipeline_params.num_consumers = kMmaThreads;
    typename Mainloop::Pipeline pipeline(storage.pipeline, pipeline_params, typename Mainloop::ClusterShape{});

    typename WorkQueue::Params queue_params;
    queue_params.role = is_producer ? WorkQueue::ThreadCategory::Producer : WorkQueue::ThreadCategory::Consumer;
    queue_params.producer_arv_count = 1;
    queue_params.consumer_arv_count = kMmaThreads;
    WorkQueue queue(storage.queue, queue_params);
    if constexpr (kStoreWarp) {
      if (threadIdx.x == 0) HStore::init(storage.h_store, kMmaThreads);
    }
    __syncthreads();  // every thread sees the initialised mbarriers

    if (is_producer) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegs>();
      if constexpr (kPdlPrefetch > 0) {
        const bool leader = threadIdx.x / 32 == 0 && cute::elect_one_sync();
        const bool storer = kStoreWarp && threadIdx.x / 32 == 1 && cute::elect_one_sync();
        if (leader) prefetch_first_weights(params);
        wait_for_previous_grid();
        allow_dependent_launch();
        if (leader) produce(params, pipeline, queue, storage);
        if (storer) run_store_warp(params, storage);
      } else {
        if (threadIdx.x / 32 == 0 && cute::elect_one_sync()) {
          produce(params, pipeline, queue, storage);
        } else if (kStoreWarp && threadIdx.x / 32 == 1 && cute::elect_one_sync()) {
          run_store_warp(params, storage);
        }
      }
    } else {
      cutlass::arch::warpgroup_reg_alloc<kMmaRegs>();
      if constexpr (kPdlPrefetch > 0) {
        wait_for_previous_grid();
        allow_dependent_launch();
      }
      consume(params, pipeline, queue, storage);
    }
  }

 private:
  // The tile's K range, in kBlockK tiles (the op makes every split a multiple of kBlockK).
  struct KRange {
    int k0, k_tiles;
  };
  __device__ __forceinline__ static KRange k_range(const GemmPairParams& p, const WorkTile& w) {
    const int split_k = w.gemm == 0 ? p.split_k0 : p.split_k1;
    const int k_total = w.gemm == 0 ? p.k : p.h_width;
    const int k0 = w.split * split_k, k_len = min(split_k, k_total - k0);
    return {k0, (k_len + kBlockK - 1) / kBlockK};
  }

  __device__ __forceinline__ static int ready_index(const GemmPairParams& p, int m_block, int split) {
    return p.tile_sync ? m_block * p.splits1 + split : m_block;
  }

  // Whether tile w's epilogue runs from the registers (kRegisterEpilogue): a tile computed whole,
  // not a K-split's part (but for GEMM1's folded splits), and for SwiGLU a full-width GEMM0 tile (a
  // narrower last tile pairs its gate and up columns half its width apart, which the staging tile
  // does).
  __device__ __forceinline__ static bool epilogue_in_registers(const GemmPairParams& p, const WorkTile& w) {
    if constexpr (!kRegisterEpilogue) return false;
    if (w.gemm == 1) {
      if constexpr (kFoldSplits) return true;
      return p.splits1 == 1;
    }
    return !kSplitK0 &&
           (p.activation != static_cast<int>(Activation::kSwiGLU) || (w.n_tile + 1) * kBlockN <= p.n0);
  }

  // Whether tile w is a folded GEMM1 split that reads the running sum (every split but the first),
  // through the staging tile's shared memory (Epilogue::fold_split).
  __device__ __forceinline__ static bool reads_running_sum(const GemmPairParams& p, const WorkTile& w) {
    if constexpr (kFoldPair) {
      if (w.gemm == 1 && p.splits1 >= 3 && w.split == p.splits1 - 2) return false;  // stores its partial only
    }
    return kFoldSplits && w.gemm == 1 && p.splits1 > 1 && w.split > 0;
  }

  // Before the wait for the previous kernel (kPdlPrefetch): the weights of the tile named by this
  // CTA's block index, the first kPdlPrefetch K tiles, into L2. The order table is the host's, not
  // the previous kernel's, and B is read through L2, so neither read needs the wait.
  __device__ __forceinline__ static void prefetch_first_weights(const Params& params) {
    const GemmPairParams& p = params.p;
    const int4 entry = p.order[blockIdx.x];
    const WorkTile w{entry.x, entry.y, entry.z, entry.w};
    const KRange kr = k_range(p, w);
    const int k_tiles = min(kr.k_tiles, kPdlPrefetch);
    if (w.gemm == 0) {
      Mainloop::prefetch_b(params.gemm[0], p.n0, p.k, w.n_tile, kr.k0 / kBlockK, k_tiles);
    } else {
      Mainloop::prefetch_b(params.gemm[1], p.n1, p.h_width, w.n_tile, kr.k0 / kBlockK, k_tiles);
    }
  }

  // The producer's elected thread: tickets until they run out, each tile's entry to the queue
  // (a tile's entry -1 tells the consumers to stop), then its loads.
  __device__ __forceinline__ static void produce(const Params& params, typename Mainloop::Pipeline& pipeline,
                                                 WorkQueue& queue, SharedStorage& storage) {
    const GemmPairParams& p = params.p;
    Mainloop::prefetch_descriptors(params.gemm[0]);
    Mainloop::prefetch_descriptors(params.gemm[1]);
    auto state = cutlass::make_producer_start_state<typename Mainloop::Pipeline>();
    auto slot = cutlass::make_producer_start_state<WorkQueue>();
    for (;;) {
      queue.producer_acquire(slot);  // the ticket is taken once its entry has somewhere to go
      const unsigned long long t_entry = GEMM_PAIR_TRACE_NOW();
      int taken;
      int4 entry;
      const bool more = take_ticket(p, taken, entry);
      const int ticket = GEMM_PAIR_TRACE_SLOT(p.order, taken);  // in a trace build, the ticket's probe row
      if (more) GEMM_PAIR_TRACE_TICKET(ticket, t_entry);
      storage.work[slot.index()] = more ? entry : make_int4(-1, 0, 0, 0);
      storage.ticket[slot.index()] = ticket;
      queue.producer_commit(slot);  // an mbarrier arrive: releases the entry to the consumers
      ++slot;
      if (!more) return;
      const WorkTile w{entry.x, entry.y, entry.z, entry.w};
      load_tile(params, w, ticket, pipeline, state, storage);
    }
  }

  __device__ __forceinline__ static void load_tile(const Params& params, const WorkTile& w, int ticket,
                                                   typename Mainloop::Pipeline& pipeline,
                                                   typename Mainloop::PipelineState& state, SharedStorage& storage) {
    const GemmPairParams& p = params.p;
    const KRange kr = k_range(p, w);
    // At most kEvictFirstRowBlocks row blocks: a weight tile's reads (one per row block) come at
    // consecutive tickets of the order, so they need no L2 residency beyond the first read's.
    const bool weights_streamed = p.m <= kBlockM * kEvictFirstRowBlocks;
    if (w.gemm == 0) {
      Mainloop::load(params.gemm[0], pipeline, state, p.m, p.n0, p.k, w.m_block, w.n_tile, kr.k0 / kBlockK,
                     kr.k_tiles, weights_streamed, storage.ring, [&] { GEMM_PAIR_TRACE_AT(ticket, 1); });
      return;
    }
    int target = p.tiles0;  // row granularity: every GEMM0 tile of the row block
    if (p.tile_sync) {      // the GEMM0 tiles that make h columns [k0, k0 + split_k1)
      const int h_per_tile = Epilogue::h_cols_per_tile(p);
      target = (min(kr.k0 + p.split_k1, p.h_width) + h_per_tile - 1) / h_per_tile - kr.k0 / h_per_tile;
    }
    const int* ready = p.ready + ready_index(p, w.m_block, w.split);
    Mainloop::load(params.gemm[1], pipeline, state, p.m, p.n1, p.h_width, w.m_block, w.n_tile, kr.k0 / kBlockK,
                   kr.k_tiles, weights_streamed, storage.ring, [&] {
                     if (p.wait) {
                       wait_until(ready, target, ThisThread{});
                       fence_proxy_async_global();  // the acquire's view of h, for the TMA loads
                     }
                     GEMM_PAIR_TRACE_AT(ticket, 1);
                   });
  }

  // The store warp's elected thread (kStoreWarp): the h tiles the consumers hand over, each stored
  // and then counted ready as signal_h counts it, until the consumers stop.
  __device__ __forceinline__ static void run_store_warp(const Params& params, SharedStorage& storage) {
    if constexpr (kStoreWarp) {
      const GemmPairParams& p = params.p;
      HStore::run(params.store_h, storage.h_store, p.m, p.h_width, [&](int m_block, int n_tile) {
        add_release(h_ready_counter(p, m_block, n_tile), 1);
      });
    }
  }

  // Every consumer thread: the queue's tiles in order, until its stop entry.
  __device__ __forceinline__ static void consume(const Params& params, typename Mainloop::Pipeline& pipeline,
                                                 WorkQueue& queue, SharedStorage& storage) {
    typename Mainloop::PipelineState read{};
    typename WorkQueue::PipelineState slot{};
    int h_handed = 0;  // tiles handed to the store warp (kStoreWarp)
    for (;;) {
      queue.consumer_wait(slot);
      const int4 entry = storage.work[slot.index()];
      const int ticket = storage.ticket[slot.index()];
      const WorkTile w{entry.x, entry.y, entry.z, entry.w};
      // Released at once, the entry lets the producer take the next ticket and load it during this
      // tile: where the staging tile has shared memory of its own, or this tile does not use it
      // (neither to stage nor to read a running sum into).
      bool release_now = kOverlapEpilogue || entry.x < 0 || epilogue_in_registers(params.p, w);
      if constexpr (kFoldSplits && !kOverlapEpilogue) {
        if (reads_running_sum(params.p, w)) release_now = false;
      }
      if (release_now) queue.consumer_release(slot);
      if (entry.x < 0) {
        if constexpr (kStoreWarp) HStore::stop(storage.h_store, h_handed, Epilogue::thread() == 0);
        return;
      }
      const int k_tiles = k_range(params.p, w).k_tiles;
      compute_tile(params, w, ticket, k_tiles, pipeline, read, storage, h_handed);
      read.advance(k_tiles);
      if (!release_now) {
        // This thread is done with the staging tile, which the next tile's TMA loads overwrite.
        cutlass::arch::fence_view_async_shared();
        queue.consumer_release(slot);
      }
      ++slot;
    }
  }

  // The readiness counter that GEMM0 tile (m_block, n_tile) adds to once its h columns are stored.
  __device__ __forceinline__ static int* h_ready_counter(const GemmPairParams& p, int m_block, int n_tile) {
    return p.ready + ready_index(p, m_block, n_tile * Epilogue::h_cols_per_tile(p) / p.split_k1);
  }

  // After a consumer thread's last store of GEMM0 tile w's h columns: their readiness counted.
  __device__ __forceinline__ static void signal_h(const GemmPairParams& p, const WorkTile& w) {
    fence_proxy_async_global();  // h is read by other CTAs' TMA loads
    signal(h_ready_counter(p, w.m_block, w.n_tile), MmaBarrier{});
  }

  // One tile's wgmma loop from ring position `read`, its epilogue and its signal.
  __device__ __forceinline__ static void compute_tile(const Params& params, const WorkTile& w, int ticket, int k_tiles,
                                                      typename Mainloop::Pipeline& pipeline,
                                                      typename Mainloop::PipelineState read, SharedStorage& storage,
                                                      int& h_handed) {
    const GemmPairParams& p = params.p;
    auto acc = Mainloop::make_accumulators();
    Mainloop::mma(params.gemm[w.gemm], pipeline, read, acc, k_tiles, Epilogue::thread(), storage.ring);
    const bool tracer = Epilogue::thread() == 0;  // the consumer thread that writes the probes
    if (tracer) GEMM_PAIR_TRACE_AT(ticket, 2);
    if (epilogue_in_registers(p, w)) {
      if (tracer) GEMM_PAIR_TRACE_AT(ticket, 4);
      const int row0 = w.m_block * kBlockM, rows = min(kBlockM, p.m - row0);
      if (w.gemm == 0) {
        if constexpr (kStoreWarp) {
          if (p.activation == static_cast<int>(Activation::kSwiGLU)) {  // a full-width tile here
            HStore::acquire(storage.h_store, h_handed);
            Epilogue::template stage_h_registers<typename Mainloop::TiledMma>(acc, HStore::buffer(storage.h_store));
            HStore::commit(storage.h_store, w.m_block, w.n_tile, Epilogue::thread() == 0);
            ++h_handed;
            if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);  // the hand-off: h lands and is signalled later
            return;
          }
        }
        Epilogue::template store_h_registers<typename Mainloop::TiledMma>(acc, p, row0, rows, w.n_tile);
        signal_h(p, w);
      } else {
        if (kFoldSplits && p.splits1 > 1) {
          if (!Epilogue::template fold_split<typename Mainloop::TiledMma, kFoldPair>(
                  acc, Epilogue::running_tile(p, w.m_block, w.n_tile),
                  kFoldPair ? Epilogue::pair_tile(p, w.m_block, w.n_tile) : nullptr,
                  p.arrived1 + w.m_block * p.tiles1 + w.n_tile,
                  w.split, p.splits1, rows, storage.epilogue, MmaBarrier{})) {
            if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
            return;  // a later split writes the output tile
          }
        }
        if (tracer) GEMM_PAIR_TRACE_AT(ticket, 5);
        Epilogue::template store_out_registers<typename Mainloop::TiledMma>(acc, p, row0, rows, w.n_tile);
      }
      if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
      return;
    }
    MmaBarrier::sync();  // every consumer is done reading the previous tile's staging tile
    float* sC = Epilogue::template stage<typename Mainloop::TiledMma>(acc, storage.epilogue, MmaBarrier{});
    if (tracer) GEMM_PAIR_TRACE_AT(ticket, 4);
    const int row0 = w.m_block * kBlockM, rows = min(kBlockM, p.m - row0);
    if (w.gemm == 0) {
      const int col0 = w.n_tile * kBlockN, cols = min(kBlockN, p.n0 - col0);
      if constexpr (kSplitK0) {
        if (!Epilogue::template reduce_splits<0>(sC, p, w.m_block, w.n_tile, w.split, row0, rows, col0, cols,
                                                 MmaBarrier{})) {
          if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
          return;  // another split finishes the tile
        }
      }
      Epilogue::store_h(sC, p, row0, rows, w.n_tile);
      signal_h(p, w);
      if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
      return;
    }
    const int col0 = w.n_tile * kBlockN, cols = min(kBlockN, p.n1 - col0);
    if (p.splits1 > 1 && !Epilogue::template reduce_splits<1>(sC, p, w.m_block, w.n_tile, w.split, row0, rows, col0,
                                                             cols, MmaBarrier{})) {
      if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
      return;  // another split writes the output tile
    }
    if (tracer) GEMM_PAIR_TRACE_AT(ticket, 5);
    Epilogue::store_out(sC, p, row0, rows, w.n_tile);
    if (tracer) GEMM_PAIR_TRACE_AT(ticket, 3);
  }
};

template <typename Kernel>
__global__ void __launch_bounds__(Kernel::kNThreads, Kernel::kCtasPerSm)
    gemm_pair_kernel_sm90(const __grid_constant__ typename Kernel::Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) char smem[];
  Kernel{}(params, smem);
  const GemmPairParams& p = params.p;
  const int m_blocks = (p.m + Kernel::kBlockM - 1) / Kernel::kBlockM;
  retire(p.ticket, p.ticket + kExitedAfterTicket, p.ready, counters_after_ticket(p, m_blocks));
#endif
}

}  // namespace cute_ops::gemm_pair
