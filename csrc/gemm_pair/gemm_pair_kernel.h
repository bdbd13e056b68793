#pragma once
// gemm_pair: out = act(a b0^T) b1^T in one launch. The kernel is three parts and the dependency
// between the GEMMs: a scheduler hands the CTA its tile (TicketScheduler, tile_scheduler.h), a
// mainloop computes the tile's product (MainloopSm80, mainloop_sm80.h), an epilogue stores it
// (Epilogue, epilogue.h), and this file says which GEMM1 tile waits for which GEMM0 tiles
// (the ready counters, signalled and awaited with tile_sync.h).
//
//   GEMM0 tile (m, n, s): the product over K-split s of a[m block] b0[n's rows]^T; the split that
//                         finishes the tile last (every split when K is not split) writes
//                         h[m block, n's columns] = act(sum over splits), then signals the counter
//                         of its row block (or of the GEMM1 K-split reading it).
//   GEMM1 tile (m, n, s): streams b1's first stages, waits for the h columns of split s, then
//                         out[m block, n block] (+)= h[m block, split s] b1[n block, split s]^T.
#include <cute/tensor.hpp>

#include "gemm_pair/epilogue.h"
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/tile_scheduler.h"
#include "gemm_pair/tile_sync.h"
#include "gemm_pair/trace.h"

namespace cute_ops::gemm_pair {

using namespace cute;

// kSplitK0: whether GEMM0 may be split along K. A separate instantiation, because the reduction's
// code in the kernel changes how the compiler schedules the mainloop: the 128-row config ran 3.5%
// slower at M = 128 with it compiled in, though unused (docs/perf-notes.md).
template <typename Mainloop_, typename Epilogue_, typename Scheduler_, bool kSplitK0_>
struct GemmPairKernel {
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using Scheduler = Scheduler_;
  static constexpr bool kSplitK0 = kSplitK0_;
  using Element = typename Mainloop::Element;
  static constexpr int kBlockM = Mainloop::kBlockM, kBlockN = Mainloop::kBlockN;
  static constexpr int kNThreads = Mainloop::kNThreads;
  static_assert(Epilogue::kBlockM == kBlockM && Epilogue::kBlockN == kBlockN && Epilogue::kNThreads == kNThreads);

  // The mainloop's ring and the epilogue's staging tile take turns: the mainloop ends with a
  // barrier after its last shared-memory read. The scheduler's entry lives apart (static shared
  // memory, in operator()), since the ring is filled while it may still be read.
  union SharedStorage {
    typename Mainloop::SharedStorage mainloop;
    typename Epilogue::SharedStorage epilogue;
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage));  // dynamic shared memory

  __device__ __forceinline__ void operator()(const GemmPairParams& p, char* smem) const {
    __shared__ typename Scheduler::SharedStorage scheduler_storage;
    SharedStorage& storage = *reinterpret_cast<SharedStorage*>(smem);
    const WorkTile work = Scheduler(scheduler_storage).fetch(p, CtaBarrier{});
    if (work.gemm == 0) {
      gemm0_tile(p, work, storage);
    } else {
      gemm1_tile(p, work, storage);
    }
  }

 private:
  // The ready counter a GEMM0 tile signals, or a GEMM1 split waits on (params.h lays them out).
  __device__ __forceinline__ static int ready_index(const GemmPairParams& p, int m_block, int split) {
    return p.tile_sync ? m_block * p.splits1 + split : m_block;
  }

  __device__ __forceinline__ static void gemm0_tile(const GemmPairParams& p, const WorkTile& w,
                                                    SharedStorage& storage) {
    const int row0 = w.m_block * kBlockM, rows = min(kBlockM, p.m - row0);
    const int col0 = w.n_tile * kBlockN, cols = min(kBlockN, p.n0 - col0);
    const int k0 = w.split * p.split_k0, k_len = min(p.split_k0, p.k - k0);
    auto acc = Mainloop::make_accumulators();
    Mainloop{}(acc, static_cast<const Element*>(p.a) + row0 * p.lda + k0, p.lda, rows,
               static_cast<const Element*>(p.b0) + static_cast<int64_t>(col0) * p.k + k0, p.k, cols, k_len,
               storage.mainloop, [] { GEMM_PAIR_TRACE(1); });
    GEMM_PAIR_TRACE(2);
    float* sC = Epilogue::template stage<typename Mainloop::TiledMma>(acc, storage.epilogue, CtaBarrier{});
    if constexpr (kSplitK0) {
      if (!Epilogue::template reduce_splits<0>(sC, p, w.m_block, w.n_tile, w.split, row0, rows, col0, cols,
                                               CtaBarrier{})) {
        GEMM_PAIR_TRACE(3);
        return;  // another split finishes the tile
      }
    }
    Epilogue::store_h(sC, p, row0, rows, w.n_tile);
    const int h_per_tile = Epilogue::h_cols_per_tile(p);
    signal(p.ready + ready_index(p, w.m_block, w.n_tile * h_per_tile / p.split_k1), CtaBarrier{});
    GEMM_PAIR_TRACE(3);
  }

  __device__ __forceinline__ static void gemm1_tile(const GemmPairParams& p, const WorkTile& w,
                                                    SharedStorage& storage) {
    const int row0 = w.m_block * kBlockM, rows = min(kBlockM, p.m - row0);
    const int col0 = w.n_tile * kBlockN, cols = min(kBlockN, p.n1 - col0);
    const int k0 = w.split * p.split_k1, k_len = min(p.split_k1, p.h_width - k0);
    int target = p.tiles0;  // row granularity: every GEMM0 tile of the row block
    if (p.tile_sync) {  // the GEMM0 tiles that make h columns [k0, k0 + k_len)
      const int h_per_tile = Epilogue::h_cols_per_tile(p);
      target = (min(k0 + p.split_k1, p.h_width) + h_per_tile - 1) / h_per_tile - k0 / h_per_tile;
    }
    const int* ready = p.ready + ready_index(p, w.m_block, w.split);
    auto acc = Mainloop::make_accumulators();
    Mainloop{}(acc, static_cast<const Element*>(p.h) + static_cast<int64_t>(row0) * p.h_width + k0, p.h_width, rows,
               static_cast<const Element*>(p.b1) + static_cast<int64_t>(col0) * p.h_width + k0, p.h_width, cols, k_len,
               storage.mainloop, [&] {
                 if (p.wait) wait_until(ready, target, CtaBarrier{});
                 GEMM_PAIR_TRACE(1);
               });
    GEMM_PAIR_TRACE(2);
    float* sC = Epilogue::template stage<typename Mainloop::TiledMma>(acc, storage.epilogue, CtaBarrier{});
    if (p.splits1 > 1 && !Epilogue::template reduce_splits<1>(sC, p, w.m_block, w.n_tile, w.split, row0, rows,
                                                             col0, cols, CtaBarrier{})) {
      GEMM_PAIR_TRACE(3);
      return;  // another split writes the output tile
    }
    Epilogue::store_out(sC, p, row0, rows, w.n_tile);
    GEMM_PAIR_TRACE(3);
  }
};

template <typename Kernel>
__global__ void __launch_bounds__(Kernel::kNThreads) gemm_pair_kernel(const __grid_constant__ GemmPairParams p) {
  extern __shared__ __align__(128) char smem[];
  Kernel{}(p, smem);
  const int m_blocks = (p.m + Kernel::kBlockM - 1) / Kernel::kBlockM;
  retire(p.ticket, p.ticket + kExitedAfterTicket, p.ready, counters_after_ticket(p, m_blocks));
}

}  // namespace cute_ops::gemm_pair
