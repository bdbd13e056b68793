#pragma once
// The SM90 kernel's hand-off of h (CUTE_OPS_GEMM_PAIR_SM90_STORE_WARP, 256-row tiles): a GEMM0
// tile's consumers write its SwiGLU output into a staging buffer in shared memory and go back to
// their next tile's k-loop; one thread of a spare warp of the producer warp group stores the
// buffer by TMA, waits until the store has landed, and signals the tile's h columns ready. Why:
// the register epilogue's global stores held a 256-row tile's consumers 1.2-3.4 us of a ~50 us
// tile, with the tensor cores idle (docs/perf-notes.md, session 71).
//
// Order of a tile through the buffer:
//   consumers: wait(empty) -> st.shared of h -> fence.proxy.async.shared::cta -> arrive(full)
//   store thread: wait(full) -> TMA store -> wait_group.read 0 -> arrive(empty)
//                 -> wait_group 0 -> fence.proxy.async.global -> red.release.gpu on the counter
// The readers are unchanged (acquire, proxy fence, TMA load of h; tile_sync.h). Deadlock freedom
// is unchanged too: the store thread waits only for a tile whose consumers have already finished
// it and for its own stores, and the consumers wait only for the buffer, which the store thread
// frees without waiting for anything else; so no consumer holds back a signal that some producer
// waits for (docs/gemm_pair.md).
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "gemm_pair/tile_sync.h"

namespace cute_ops::gemm_pair {

using namespace cute;

struct NoHStore {};  // in place of HStoreSm90's params where the store warp is off

// kHCols: the h columns of one GEMM0 tile (kBlockN / 2 with SwiGLU), 128 bytes of a row.
template <typename Element, int kBlockM, int kHCols>
struct HStoreSm90 {
  static_assert(kHCols * sizeof(Element) == 128, "one 128-byte swizzle row per tile row");
  // Rows of 128 bytes with the 128-byte swizzle: a warp's 4-byte stores of 8 rows x 16 bytes fall
  // in distinct banks, and the TMA store reads the same swizzle.
  using SmemLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHCols>>{}));
  using TmaStore = decltype(make_tma_copy(
      SM90_TMA_STORE{},
      make_tensor(static_cast<Element*>(nullptr),
                  make_layout(make_shape(int32_t(0), int32_t(0)), make_stride(int64_t(0), _1{}))),
      SmemLayout{}));

  struct Params {
    TmaStore tma;  // h [m, h_width], row-major
  };

  struct SharedStorage {
    array_aligned<Element, kBlockM * kHCols, 1024> buffer;  // the swizzle repeats every 1024 bytes
    cutlass::arch::ClusterBarrier full;   // the consumers' arrivals: the buffer holds a tile
    cutlass::arch::ClusterBarrier empty;  // the store thread's: the buffer was read out
    int4 tile;                            // the buffer's tile: (m_block, n_tile, 0, 0); m_block -1: stop
  };

  // Host: h's TMA descriptor (h_width a multiple of 8, h 16-byte aligned: as GEMM1's loads of h).
  static Params make_params(void* h, int m, int h_width) {
    Tensor tensor_h = make_tensor(static_cast<Element*>(h),
                                  make_layout(make_shape(m, h_width), make_stride(int64_t{h_width}, _1{})));
    return {make_tma_copy(SM90_TMA_STORE{}, tensor_h, SmemLayout{})};
  }

  // One thread, before the kernel's first __syncthreads.
  __device__ __forceinline__ static void init(SharedStorage& s, int consumer_threads) {
    s.full.init(consumer_threads);
    s.empty.init(1);
  }

  __device__ __forceinline__ static auto buffer(SharedStorage& s) {
    return make_tensor(make_smem_ptr(s.buffer.data()), SmemLayout{});
  }

  // Consumers, every thread, before writing the buffer for their `uses`-th tile (0, 1, ...): the
  // store thread has read the previous one out (the first wait passes at once: parity 1 is the
  // phase before the barrier's first).
  __device__ __forceinline__ static void acquire(SharedStorage& s, int uses) { s.empty.wait((uses & 1) ^ 1); }

  // Consumers, every thread, after writing the buffer: hands the tile over. `writer`: the one
  // thread that writes the tile's coordinates (its arrival releases them with its own stores).
  __device__ __forceinline__ static void commit(SharedStorage& s, int m_block, int n_tile, bool writer) {
    cutlass::arch::fence_view_async_shared();  // this thread's st.shared, for the TMA store
    if (writer) s.tile = make_int4(m_block, n_tile, 0, 0);
    s.full.arrive();
  }

  // Consumers, every thread, at their stop entry: tells the store thread to return.
  __device__ __forceinline__ static void stop(SharedStorage& s, int uses, bool writer) {
    acquire(s, uses);
    if (writer) s.tile = make_int4(-1, 0, 0, 0);
    s.full.arrive();
  }

  // The store thread: each tile the consumers hand over, until their stop; signal(m_block, n_tile)
  // publishes a stored tile (a release of the counter the readers acquire).
  template <typename Signal>
  __device__ __forceinline__ static void run(const Params& params, SharedStorage& s, int m, int h_width,
                                             Signal&& signal) {
    cute::prefetch_tma_descriptor(params.tma.get_tma_descriptor());
    Tensor mH = params.tma.get_tma_tensor(make_shape(m, h_width));  // (m, h_width) coordinates
    auto tma = params.tma.get_slice(Int<0>{});
    Tensor tHsH = tma.partition_S(buffer(s));
    for (int uses = 0;; ++uses) {
      s.full.wait(uses & 1);
      const int4 tile = s.tile;
      if (tile.x < 0) return;
      Tensor gH = local_tile(mH, Shape<Int<kBlockM>, Int<kHCols>>{}, make_coord(tile.x, tile.y));
      copy(params.tma, tHsH, tma.partition_D(gH));  // rows past m are clipped
      tma_store_arrive();
      tma_store_wait<0>();  // the buffer is read out
      s.empty.arrive();
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // and h is written
      fence_proxy_async_global();  // redundant after the full wait, kept as the readers' side has it
      signal(tile.x, tile.y);
    }
  }
};

}  // namespace cute_ops::gemm_pair
