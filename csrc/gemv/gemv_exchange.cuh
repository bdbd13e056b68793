#pragma once
// Device side of the exchange (gemv_exchange.h says what it is): where a slot's rows and flags
// are, the push's flags and the pull's wait.
#include <cstdint>
#include <cstdio>

#include "common/peer_lines.cuh"
#include "common/peer_wait.h"
#include "common/vec.cuh"
#include "gemv/gemv.h"
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

// kPushLines: a unit's output rows as the lines of the next peer_all_reduce call, into every rank's
// workspace at this rank's inbox (its own included). Lane (g, c) holds columns col_lo = 16 unit + g
// and col_hi = col_lo + 8 of rows 2c and 2c + 1; a line is 4 neighbouring columns of a row, so lanes
// g = 0 and 4 (the pushers) store the lines of their columns and their three right neighbours'.
//
// The line of (row 2c + j, col_lo or col_hi) a pusher stores, -1 where there is none (4 | col and
// 4 | out_cols: a line is whole or absent).
__device__ __forceinline__ int64_t pushed_line(const GemvParams& p, int col_lo, int col_hi, int g, int c, int j,
                                               int half) {
  const int row = 2 * c + j, col = half == 0 ? col_lo : col_hi;
  return g % 4 == 0 && row < p.m && col >= 0 ? (static_cast<int64_t>(row) * p.out_cols + col) / 4 : -1;
}

// This rank's own workspace, without indexing the parameter array by a run-time rank (which puts
// the array on the stack).
__device__ __forceinline__ void* own_workspace(const GemvExchangeParams& e) {
  void* own = e.buffers[0];
#pragma unroll
  for (int r = 1; r < kGemvMaxRanks; ++r) own = r == e.rank ? e.buffers[r] : own;
  return own;
}

// The call counts of the lines a pusher stores for a unit: read when the unit starts (after this
// gemv's wait for the previous kernel, so after the previous call of each line's CTA ended:
// peer_all_reduce.h, pushed calls), so that their round trip overlaps the unit's stream instead of
// waiting in its epilogue.
struct PushLineCounts {
  uint32_t count[2][2];
};

__device__ __forceinline__ PushLineCounts load_push_line_counts(const GemvExchangeParams& e, const GemvParams& p,
                                                                int col_lo, int col_hi, int g, int c) {
  const PeerLayout layout{e.world};
  void* own = own_workspace(e);
  PushLineCounts counts;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t line = pushed_line(p, col_lo, col_hi, g, c, j, half);
      counts.count[j][half] = line >= 0 ? __ldcg(peer_uses(own, layout, line / kPeerLinesPerBlock)) : 0u;
    }
  }
  return counts;
}

// In the warp that ran a unit's epilogue (every lane, converged): the lines (v: gemv_body's sums,
// before the residual). The values are the outputs' bits as gemv stores them (rounded, the residual
// added).
template <typename T, bool kResidual>
__device__ __forceinline__ void push_unit_lines(const GemvExchangeParams& e, const GemvParams& p, int col_lo,
                                                int col_hi, const float (&v)[4], int g, int c,
                                                const PushLineCounts& counts) {
  static_assert(sizeof(T) == 2, "a line holds 4 16-bit outputs");
  const PeerLayout layout{e.world};
  const T* residual = static_cast<const T*>(p.residual);
  uint32_t bits[2][2][4];  // [row 2c + j][col_lo or col_hi][this lane, then its 3 right neighbours]
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 2 * c + j, col = half == 0 ? col_lo : col_hi;
      const bool valid = row < p.m && col >= 0;
      float y = v[2 * half + j];
      if (kResidual && valid) y = to_float(from_float<T>(y)) + to_float(residual[row * p.residual_row_stride + col]);
      const T t = from_float<T>(y);
      bits[j][half][0] = valid ? static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(&t)) : 0u;
#pragma unroll
      for (int d = 1; d < 4; ++d) bits[j][half][d] = __shfl_down_sync(0xffffffffu, bits[j][half][0], 4 * d);
    }
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t line = pushed_line(p, col_lo, col_hi, g, c, j, half);
      if (line < 0) continue;
      const uint32_t* w = bits[j][half];
      const uint32_t count = counts.count[j][half];
#pragma unroll
      for (int r = 0; r < kGemvMaxRanks; ++r) {
        if (r >= e.world) break;
        store_peer_line(peer_line_at(e.buffers[r], layout, count & 1, e.rank, line), w[0] | w[1] << 16,
                        w[2] | w[3] << 16, count + 1);
      }
    }
  }
}

}  // namespace cute_ops::gemv
