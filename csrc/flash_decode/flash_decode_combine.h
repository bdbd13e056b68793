#pragma once
// Merges the num_splits float32 partial outputs of one query row by their log-sum-exps:
// out = sum_s exp(lse_s - M) O_s / sum_s exp(lse_s - M), M = max lse; empty splits (lse = -inf)
// weigh 0 and their O is not used. A NaN lse (a NaN in K reached that split's scores, or the
// attention kernel poisoned a bad sequence) makes the row's out and lse NaN: only -inf means
// empty. A NaN in O alone (from V) reaches out through the weighted sum. One CTA per (batch, head, token) row, so that
// even one sequence's 32 rows spread over 32 SMs. Warp w takes splits w, w + 4, ... in batches
// whose lse and O loads are all issued before any is used (one memory round trip for up to 32
// splits), keeping a running max as in online softmax; the four warps meet in shared memory.
#include <type_traits>

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
  __shared__ float s_max[kWarps], s_sum[kWarps];
  __shared__ bool s_nan[kWarps];
  __shared__ float s_acc[kWarps][kHeadDim];
  const index_t total = static_cast<index_t>(p.b) * p.h * p.sq;
  const index_t row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = p.num_splits;
  COMBINE_TRACE(0);
  wait_for_previous_grid();  // the partials come from the attention kernel
  COMBINE_TRACE(1);

  float run_max = -INFINITY, run_sum = 0.f, acc[kPerLane] = {};
  bool nan_lse = false;  // warp-uniform: every lane reads the same lse values
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
    float batch_max = run_max;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      nan_lse |= isnan(lse[j]);
      batch_max = fmaxf(batch_max, lse[j]);  // drops NaN: they are counted above
    }
    if (batch_max == -INFINITY) continue;  // only empty splits so far
    const float rescale = __expf(run_max - batch_max);  // 0 while run_max is -inf
    run_sum *= rescale;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[c] *= rescale;
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (lse[j] > -INFINITY) {  // neither empty nor NaN
        const float w = __expf(lse[j] - batch_max);
        const float* v = reinterpret_cast<const float*>(&o[j]);
        run_sum += w;
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) acc[c] += w * v[c];
      }
    }
    run_max = batch_max;
  }
  if (lane == 0) s_max[warp] = run_max, s_sum[warp] = run_sum, s_nan[warp] = nan_lse;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) s_acc[warp][lane * kPerLane + c] = acc[c];
  __syncthreads();

  float row_max = -INFINITY;
  bool nan_row = false;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) row_max = fmaxf(row_max, s_max[w]), nan_row |= s_nan[w];
  float scale[kWarps], row_sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    scale[w] = s_max[w] == -INFINITY ? 0.f : __expf(s_max[w] - row_max);
    row_sum += scale[w] * s_sum[w];
  }
  const float inv = nan_row ? NAN : row_sum > 0.f ? 1.f / row_sum : 0.f;
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
  if (threadIdx.x == 0) p.lse[row] = nan_row ? NAN : row_sum > 0.f ? row_max + __logf(row_sum) : -INFINITY;
  COMBINE_TRACE(2);
}

}  // namespace cute_ops::decode
