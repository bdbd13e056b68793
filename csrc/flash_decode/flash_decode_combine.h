#pragma once
// Merges the num_splits float32 partial outputs of one query row by their log-sum-exps: weights
// exp(lse_s - max lse); empty splits (lse = -inf) weigh 0 and are not read. One warp per
// (batch, head, token) row. The lanes first read the splits' lse values side by side (one load
// each rather than num_splits dependent ones), keep the weights in shared memory, then every
// lane sums its columns over the splits with several loads in flight.
#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(128) flash_decode_combine_kernel(const __grid_constant__ FlashDecodeParams p) {
  using index_t = FlashDecodeParams::index_t;
  constexpr int kPerLane = kHeadDim / 32;  // consecutive columns a lane owns: 2 or 4
  __shared__ float s_weight[4][kDecodeMaxSplits];
  const index_t total = static_cast<index_t>(p.b) * p.h * p.sq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const index_t row = static_cast<index_t>(blockIdx.x) * 4 + warp;
  if (row >= total) return;
  const int n = p.num_splits;

  float lse_max = -INFINITY;
  for (int s = lane; s < n; s += 32) lse_max = fmaxf(lse_max, p.lse_partial[s * total + row]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) lse_max = fmaxf(lse_max, __shfl_xor_sync(0xffffffffu, lse_max, o));
  float weight_sum = 0.f;
  for (int s = lane; s < n; s += 32) {
    const float l = p.lse_partial[s * total + row];
    const float w = l == -INFINITY ? 0.f : __expf(l - lse_max);
    s_weight[warp][s] = w;
    weight_sum += w;
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) weight_sum += __shfl_xor_sync(0xffffffffu, weight_sum, o);
  __syncwarp();

  float acc[kPerLane] = {};
  const float* o_row = p.o_partial + row * kHeadDim + lane * kPerLane;
#pragma unroll 8
  for (int s = 0; s < n; ++s) {
    const float w = s_weight[warp][s];
    if (w != 0.f) {  // an empty split's output was never written
      const float* o = o_row + s * total * kHeadDim;
      if constexpr (kPerLane == 4) {
        const float4 v = *reinterpret_cast<const float4*>(o);
        acc[0] += w * v.x, acc[1] += w * v.y, acc[2] += w * v.z, acc[3] += w * v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(o);
        acc[0] += w * v.x, acc[1] += w * v.y;
      }
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
