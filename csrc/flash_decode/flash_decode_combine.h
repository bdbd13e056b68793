#pragma once
// Merges the num_splits float32 partial outputs of one query row by their log-sum-exps:
// out = sum_s exp(lse_s - M) O_s / sum_s exp(lse_s - M), M = max lse, with SoftmaxMergeState
// (common/cute/softmax_merge.h: empty and NaN rules). The O of a split that is not live (empty, or
// NaN lse: the attention kernel poisoned a bad sequence or a NaN in K reached it) is not read
// into the sum; a NaN in O alone (from V) reaches out through it. One CTA per (batch, head,
// token) row, so that even one sequence's 32 rows spread over 32 SMs. Warp w takes splits w,
// w + 4, ... in batches whose lse and O loads are all issued before any is used (one memory round
// trip for up to 32 splits), each batch merged into the warp's running state; the four warps'
// states and accumulators meet in shared memory.
#include <type_traits>

#include "common/cute/softmax_merge.h"
#include "common/pdl.h"
#include "flash_decode/flash_decode.h"
#include "flash_decode/trace.h"

namespace cute_ops::decode {

constexpr int kCombineThreads = 128;

template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(kCombineThreads)
    flash_decode_combine_kernel(const __grid_constant__ FlashDecodeParams p) {
  using index_t = FlashDecodeParams::index_t;
  constexpr int kWarps = kCombineThreads / 32;
  constexpr int kPerLane = kHeadDim / 32;  // consecutive columns a lane owns: 2 or 4
  constexpr int kBatch = 8;                // splits a warp has in flight
  using Vec = std::conditional_t<kPerLane == 4, float4, float2>;
  __shared__ SoftmaxMergeState s_state[kWarps];
  __shared__ float s_acc[kWarps][kHeadDim];
  const index_t total = static_cast<index_t>(p.b) * p.h * p.sq;
  const index_t row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = p.num_splits;
  COMBINE_TRACE(0);
  wait_for_previous_grid();  // the partials come from the attention kernel
  COMBINE_TRACE(1);

  // Warp-uniform: every lane reads the same lse values.
  SoftmaxMergeState state = SoftmaxMergeState::empty();
  float acc[kPerLane] = {};
  const float* o_row = p.o_partial + row * kHeadDim + lane * kPerLane;
  for (int s0 = warp; s0 < n; s0 += kWarps * kBatch) {
    float lse[kBatch];
    Vec o[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int s = s0 + j * kWarps;
      lse[j] = s < n ? p.lse_partial[s * total + row] : -INFINITY;
      if (s < n) o[j] = *reinterpret_cast<const Vec*>(o_row + s * total * kHeadDim);
    }
    float wt[kBatch];
    const float rescale = state.merge(lse, wt);
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] *= rescale;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (SoftmaxMergeState::live(lse[j])) {  // o[j] was loaded and belongs in the sum
        const float* v = reinterpret_cast<const float*>(&o[j]);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) acc[c] += wt[j] * v[c];
      }
    }
  }
  if (lane == 0) s_state[warp] = state;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) s_acc[warp][lane * kPerLane + c] = acc[c];
  __syncthreads();

  // The warps' states are one batch of partials; scale[w] weighs warp w's accumulator.
  SoftmaxMergeState row_state = SoftmaxMergeState::empty();
  float scale[kWarps];
  row_state.merge(s_state, scale);
  const float inv = row_state.inv_sum();
  const int i = static_cast<int>(row % p.sq);
  const int head = static_cast<int>((row / p.sq) % p.h);
  const int bidb = static_cast<int>(row / (static_cast<index_t>(p.sq) * p.h));
  Element* out = static_cast<Element*>(p.o) + bidb * p.o_batch_stride + i * p.o_row_stride + head * p.o_head_stride;
  for (int col = threadIdx.x; col < kHeadDim; col += kCombineThreads) {
    float o = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += scale[w] * s_acc[w][col];
    out[col] = static_cast<Element>(o * inv);
  }
  if (threadIdx.x == 0) p.lse[row] = row_state.lse();
  COMBINE_TRACE(2);
}

}  // namespace cute_ops::decode
