#pragma once
// Device side of the exchange (gemv_exchange.h says what it is): where a slot's rows and flags
// are, the push's flags and the pull's wait.
#include <cstdint>
#include <cstdio>

#include "common/peer_wait.h"
#include "gemv/gemv_exchange.h"

namespace cute_ops::gemv {

template <typename T>
__device__ __forceinline__ GemvExchangeLayout exchange_layout(const GemvExchangeParams& e, int hidden) {
  return GemvExchangeLayout{e.slots, e.world, hidden, static_cast<int64_t>(sizeof(T))};
}

template <typename P>
__device__ __forceinline__ P* at_offset(void* base, int64_t offset) {
  return reinterpret_cast<P*>(static_cast<char*>(base) + offset);
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Push, after this CTA's rows are stored: raise its flag for the slot in every rank's buffer.
// Every thread calls it (it holds a barrier).
template <typename T>
__device__ __forceinline__ void raise_push_flags(const GemvExchangeParams& e, int hidden) {
  const GemvExchangeLayout layout = exchange_layout<T>(e, hidden);
  void* own = e.buffers[e.rank];
  uint32_t* pushes = at_offset<uint32_t>(own, layout.pushes(e.slot)) + blockIdx.x;
  const uint32_t count = __ldcg(pushes) + 1;  // read by every thread before the barrier, written after it
  if (threadIdx.x < 32) __threadfence_system();  // warp 0 stored the rows: they reach every rank before a flag
  __syncthreads();
  if (threadIdx.x < e.world) {
    store_release_sys(at_offset<uint32_t>(e.buffers[threadIdx.x], layout.flags(e.slot, e.rank)) + blockIdx.x, count);
  }
  if (threadIdx.x == 0) {
    *pushes = count;
    if (blockIdx.x == 0) *at_offset<uint32_t>(own, layout.grids(e.slot)) = gridDim.x;
  }
}

// Pull, after the wait on the previous kernel (this rank's push of the slot): wait until every
// rank's CTAs have pushed the slot as many times as this rank's have. Every thread calls it.
template <typename T>
__device__ __forceinline__ void wait_for_pushes(const GemvExchangeParams& e, int hidden) {
  const GemvExchangeLayout layout = exchange_layout<T>(e, hidden);
  void* own = e.buffers[e.rank];
  // Through L2 (ld.cg): counts an earlier kernel wrote, never an L1 line of an earlier step.
  const uint32_t expected = __ldcg(at_offset<const uint32_t>(own, layout.pushes(e.slot)));
  const int ctas = static_cast<int>(__ldcg(at_offset<const uint32_t>(own, layout.grids(e.slot))));
  const uint64_t start = global_ns();
  for (int i = threadIdx.x; i < e.world * ctas; i += blockDim.x) {
    const uint32_t* flag = at_offset<const uint32_t>(own, layout.flags(e.slot, i / ctas)) + i % ctas;
    for (int spins = 1; static_cast<int32_t>(load_acquire_sys(flag) - expected) < 0; ++spins) {
      if (spins % 1024 == 0 && global_ns() - start > kPeerWaitTimeoutNs) {
        printf("cute_ops gemv: rank %d waited %llu s for rank %d's push %u of slot %d; trapping\n", e.rank,
               static_cast<unsigned long long>(kPeerWaitTimeoutNs / 1000000000ull), i / ctas, expected, e.slot);
        __trap();
      }
    }
  }
  __syncthreads();
}

// Pull: x's row `token` of rank `rank`'s pushed rows of the slot.
template <typename T>
__device__ __forceinline__ const T* pushed_row(const GemvExchangeParams& e, int hidden, int rank, int token) {
  const GemvExchangeLayout layout = exchange_layout<T>(e, hidden);
  return at_offset<const T>(e.buffers[e.rank], layout.inbox(e.slot, rank)) + static_cast<int64_t>(token) * hidden;
}

// Push: where row `row`, column `col` of the output goes in rank `dest`'s buffer.
template <typename T>
__device__ __forceinline__ T* push_target(const GemvExchangeParams& e, int hidden, int dest, int row, int col) {
  const GemvExchangeLayout layout = exchange_layout<T>(e, hidden);
  return at_offset<T>(e.buffers[dest], layout.inbox(e.slot, e.rank)) + static_cast<int64_t>(row) * hidden + col;
}

}  // namespace cute_ops::gemv
