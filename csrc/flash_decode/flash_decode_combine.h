#pragma once
// Merges the num_splits float32 partial outputs of one query row by their log-sum-exps: weights
// exp(lse_s - max lse), empty splits (lse = -inf) skipped. One warp per (batch, head, token) row.
#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(128) flash_decode_combine_kernel(const __grid_constant__ FlashDecodeParams p) {
  using index_t = FlashDecodeParams::index_t;
  constexpr int kPerLane = kHeadDim / 32;
  const index_t total = static_cast<index_t>(p.b) * p.h * p.sq;
  const index_t row = static_cast<index_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= total) return;

  float lse_max = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) lse_max = fmaxf(lse_max, p.lse_partial[s * total + row]);
  float acc[kPerLane] = {};
  float weight_sum = 0.f;
  if (lse_max != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float l = p.lse_partial[s * total + row];
      if (l == -INFINITY) continue;  // an empty split wrote no output
      const float wt = __expf(l - lse_max);
      weight_sum += wt;
      const float* o = p.o_partial + (s * total + row) * kHeadDim + lane * kPerLane;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[j] += wt * o[j];
    }
  }
  const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  const int i = static_cast<int>(row % p.sq);
  const int head = static_cast<int>((row / p.sq) % p.h);
  const int bidb = static_cast<int>(row / (static_cast<index_t>(p.sq) * p.h));
  Element* out = static_cast<Element*>(p.o) + bidb * p.o_batch_stride + i * p.o_row_stride + head * p.o_head_stride +
                 lane * kPerLane;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) out[j] = static_cast<Element>(acc[j] * inv);
  if (lane == 0) p.lse[row] = weight_sum > 0.f ? lse_max + __logf(weight_sum) : -INFINITY;
}

}  // namespace cute_ops::decode
