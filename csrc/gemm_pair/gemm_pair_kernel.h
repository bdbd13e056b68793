#pragma once
// gemm_pair: out = act(a b0^T) b1^T in one launch. The grid has one CTA per tile of either GEMM;
// a CTA does not compute the tile its blockIdx names but the one its ticket names: the first
// thing it does is take the next ticket from a global counter and look it up in the order table
// (built on the host by a policy, tile_order.h). A tile only waits for tiles with smaller
// tickets, which are held by CTAs already running, so the launch cannot deadlock however few
// CTAs are co-resident (docs/gemm_pair.md).
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
#include "gemm_pair/kernel_traits.h"
#include "gemm_pair/mainloop.h"
#include "gemm_pair/tile_sync.h"
#include "gemm_pair/trace.h"

namespace cute_ops::gemm_pair {

using namespace cute;

// Stages the accumulators in shared memory as a row-major float32 tile for the epilogues.
template <typename Traits, typename Acc>
__device__ __forceinline__ float* stage_accumulators(const Acc& acc, char* smem) {
  Tensor sC = make_tensor(make_smem_ptr(reinterpret_cast<float*>(smem)), typename Traits::SmemLayoutC{});
  typename Traits::TiledMma tiled_mma;
  Tensor tCsC = tiled_mma.get_thread_slice(threadIdx.x).partition_C(sC);
  copy(acc, tCsC);
  __syncthreads();
  return reinterpret_cast<float*>(smem);
}

template <typename Traits>
__device__ __forceinline__ auto make_accumulators() {
  typename Traits::TiledMma tiled_mma;
  Tensor acc = partition_fragment_C(tiled_mma, Shape<Int<Traits::kBlockM>, Int<Traits::kBlockN>>{});
  clear(acc);
  return acc;
}

// The ready counter a GEMM0 tile signals, or a GEMM1 split waits on.
__device__ __forceinline__ int ready_index(const GemmPairParams& p, int m_block, int split) {
  return p.tile_sync ? m_block * p.splits + split : m_block;
}

// kSplitK0: whether GEMM0 may be split along K. A separate instantiation, because the reduction's
// code in the kernel changes how the compiler schedules the mainloop: the 128-row config ran 3.5%
// slower at M = 128 with it compiled in, though unused (docs/perf-notes.md).
template <typename Traits, bool kSplitK0>
__device__ __forceinline__ void gemm0_tile(const GemmPairParams& p, int m_block, int tile_n, int split, char* smem) {
  using Element = typename Traits::Element;
  const int row0 = m_block * Traits::kBlockM, rows = min(Traits::kBlockM, p.m - row0);
  const int col0 = tile_n * Traits::kBlockN, cols = min(Traits::kBlockN, p.n0 - col0);
  const int k0 = split * p.split_k0, k_len = min(p.split_k0, p.k - k0);
  auto acc = make_accumulators<Traits>();
  mainloop<Traits>(acc, static_cast<const Element*>(p.a) + row0 * p.lda + k0, p.lda, rows,
                   static_cast<const Element*>(p.b0) + static_cast<int64_t>(col0) * p.k + k0, p.k, cols, k_len, smem,
                   [] { GEMM_PAIR_TRACE(1); });
  GEMM_PAIR_TRACE(2);
  float* sC = stage_accumulators<Traits>(acc, smem);
  if constexpr (kSplitK0) {
    const int64_t split_stride = static_cast<int64_t>(p.m) * p.n0;
    if (!publish_partial<Traits>(sC, p.partials0, split_stride, p.n0, row0, rows, col0, cols, split,
                                 p.arrived0 + m_block * p.n0_tiles + tile_n, p.splits0)) {
      GEMM_PAIR_TRACE(3);
      return;  // another split finishes the tile
    }
    sum_partials<Traits>(sC, p.partials0, split_stride, p.n0, row0, rows, col0, cols, p.splits0);
  }
  store_h<Traits>(sC, p, row0, rows, tile_n);
  const int h_per_tile = h_cols_per_tile<Traits>(p);
  signal(p.ready + ready_index(p, m_block, tile_n * h_per_tile / p.split_k1));
  GEMM_PAIR_TRACE(3);
}

template <typename Traits>
__device__ __forceinline__ void gemm1_tile(const GemmPairParams& p, int m_block, int tile_n, int split, char* smem) {
  using Element = typename Traits::Element;
  const int row0 = m_block * Traits::kBlockM, rows = min(Traits::kBlockM, p.m - row0);
  const int col0 = tile_n * Traits::kBlockN, cols = min(Traits::kBlockN, p.n1 - col0);
  const int k0 = split * p.split_k1, k_len = min(p.split_k1, p.h_width - k0);
  int target = p.n0_tiles;  // row granularity: every GEMM0 tile of the row block
  if (p.tile_sync) {
    const int h_per_tile = h_cols_per_tile<Traits>(p);
    target = (min(k0 + p.split_k1, p.h_width) + h_per_tile - 1) / h_per_tile - k0 / h_per_tile;
  }
  const int* ready = p.ready + ready_index(p, m_block, split);
  auto acc = make_accumulators<Traits>();
  mainloop<Traits>(acc, static_cast<const Element*>(p.h) + static_cast<int64_t>(row0) * p.h_width + k0, p.h_width, rows,
                   static_cast<const Element*>(p.b1) + static_cast<int64_t>(col0) * p.h_width + k0, p.h_width, cols,
                   k_len, smem, [&] {
                     if (p.wait) wait_until(ready, target);
                     GEMM_PAIR_TRACE(1);
                   });
  GEMM_PAIR_TRACE(2);
  float* sC = stage_accumulators<Traits>(acc, smem);
  if (p.splits > 1) {
    const int64_t split_stride = static_cast<int64_t>(p.m) * p.n1;
    if (!publish_partial<Traits>(sC, p.partials, split_stride, p.n1, row0, rows, col0, cols, split,
                                 p.arrived + m_block * p.n1_tiles + tile_n, p.splits)) {
      GEMM_PAIR_TRACE(3);
      return;  // another split writes the output tile
    }
    sum_partials<Traits>(sC, p.partials, split_stride, p.n1, row0, rows, col0, cols, p.splits);
  }
  store_out<Traits>(sC, p, row0, rows, tile_n);
  GEMM_PAIR_TRACE(3);
}

template <typename Traits, bool kSplitK0>
__global__ void __launch_bounds__(Traits::kNThreads) gemm_pair_kernel(const __grid_constant__ GemmPairParams p) {
  extern __shared__ __align__(128) char smem[];
  __shared__ int4 tile;
  if (threadIdx.x == 0) {
    const unsigned long long t_entry = GEMM_PAIR_TRACE_NOW();
    const int4* entry = p.order + atomicAdd(p.ticket, 1);
    tile = *entry;
    GEMM_PAIR_TRACE_BEGIN(entry, t_entry);
  }
  __syncthreads();
  const int4 t = tile;  // (gemm, m block, n tile, K-split)
  if (t.x == 0) {
    gemm0_tile<Traits, kSplitK0>(p, t.y, t.z, t.w, smem);
  } else {
    gemm1_tile<Traits>(p, t.y, t.z, t.w, smem);
  }
}

}  // namespace cute_ops::gemm_pair
