#pragma once
// One row per `blockDim.x` threads, `blockDim.y` rows per CTA. Each thread keeps its 16-byte
// vectors of the row in registers between the sum of squares and the scaling, so the row is read
// from memory once. Rows too long for that (kVecsPerThread == 0) are read twice, the second
// time mostly from L2.
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "norm/rms_norm.h"

namespace cute_ops {

constexpr int kRmsNormMaxWarps = 32;

// Sum over the blockDim.x threads of this row; every thread of the CTA must call it.
__device__ __forceinline__ float row_sum(float v) {
  __shared__ float partial[kRmsNormMaxWarps];
  v = warp_sum(v, blockDim.x < 32 ? blockDim.x : 32);
  if (blockDim.x <= 32) return v;
  const int warps_per_row = blockDim.x / 32;
  const int warp_in_row = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) partial[threadIdx.y * warps_per_row + warp_in_row] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps_per_row; ++w) total += partial[threadIdx.y * warps_per_row + w];
  return total;
}

template <typename T, int kVecsPerThread, bool kAddResidual>
__global__ void rms_norm_kernel(const RmsNormParams p) {
  constexpr int kVec = kElemsPer16B<T>;
  using V = Vec<T, kVec>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  const int n_vecs = static_cast<int>(p.hidden / kVec);

  T* out = static_cast<T*>(p.out) + row * p.out_row_stride;
  const T* x = static_cast<const T*>(p.x) + row * p.x_row_stride;
  T* residual = static_cast<T*>(p.residual) + row * p.residual_row_stride;
  const T* weight = static_cast<const T*>(p.weight);

  // The normalised value is computed from what is stored in `residual` (rounded to T), so the
  // output equals rms_norm applied to the updated residual tensor.
  auto load_input = [&](int i) {
    V v = V::load(x + i * kVec);
    if constexpr (kAddResidual) {
      V r = V::load(residual + i * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) r.v[e] = from_float<T>(to_float(r.v[e]) + to_float(v.v[e]));
      r.store(residual + i * kVec);
      v = r;
    }
    return v;
  };
  auto store_output = [&](int i, const V& v, float inv_rms) {
    const V w = V::load(weight + i * kVec);
    V o;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o.v[e] = from_float<T>(to_float(v.v[e]) * inv_rms * to_float(w.v[e]));
    o.store(out + i * kVec);
  };

  float sum_sq = 0.f;
  if constexpr (kVecsPerThread > 0) {
    V cached[kVecsPerThread];
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (active && i < n_vecs) {
        cached[j] = load_input(i);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum_sq += to_float(cached[j].v[e]) * to_float(cached[j].v[e]);
      }
    }
    const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (active && i < n_vecs) store_output(i, cached[j], inv_rms);
    }
  } else {
    if (active) {
      for (int i = threadIdx.x; i < n_vecs; i += blockDim.x) {
        const V v = load_input(i);
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum_sq += to_float(v.v[e]) * to_float(v.v[e]);
      }
    }
    const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(p.hidden) + p.eps);
    if (active) {
      // With a residual, read back the rounded sum this thread stored above.
      const T* src = kAddResidual ? residual : x;
      for (int i = threadIdx.x; i < n_vecs; i += blockDim.x) store_output(i, V::load(src + i * kVec), inv_rms);
    }
  }
}

}  // namespace cute_ops
