#pragma once
// RMSNorm kernels. A row is handled by blockDim.x threads (a power of two), blockDim.y rows per
// CTA, one CTA per blockDim.y rows. Each thread loads its kVecsPerThread 16-byte vectors of x (and
// of the residual) at once and keeps them in registers between the reduction and the scaling, so
// the row is read from memory once; several vectors per thread keep enough bytes in flight per SM
// to cover HBM latency (docs/perf-notes.md has the measurements behind the tile choice). Rows too
// long for registers go to rms_norm_long_row_kernel, which reads the row twice, the second time
// mostly from L2.
#include "common/reduce.cuh"
#include "common/vec.cuh"
#include "norm/rms_norm.h"

namespace cute_ops {

constexpr int kRmsNormMaxWarps = 32;

// Sum over the blockDim.x threads of this row; every thread of the CTA must call it, once.
__device__ __forceinline__ float row_sum(float v) {
  __shared__ float partial[kRmsNormMaxWarps];
  v = warp_sum(v, blockDim.x < 32 ? blockDim.x : 32);
  if (blockDim.x <= 32) return v;
  const int warps_per_row = blockDim.x / 32;
  float* mine = partial + threadIdx.y * warps_per_row;
  if (threadIdx.x % 32 == 0) mine[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps_per_row; ++w) total += mine[w];
  return total;
}

template <typename T>
struct RowPointers {
  const RmsNormParams& p;
  __device__ const T* x(int64_t row) const { return static_cast<const T*>(p.x) + row * p.x_row_stride; }
  __device__ T* residual(int64_t row) const { return static_cast<T*>(p.residual) + row * p.residual_row_stride; }
  __device__ T* out(int64_t row) const { return static_cast<T*>(p.out) + row * p.out_row_stride; }
};

template <typename T, int kVecsPerThread, bool kAddResidual>
__global__ void __launch_bounds__(1024) rms_norm_kernel(const RmsNormParams p) {
  constexpr int kVec = kElemsPer16B<T>;
  using V = Vec<T, kVec>;
  const RowPointers<T> ptr{p};
  const int n_vecs = static_cast<int>(p.hidden / kVec);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  auto in_row = [&](int j) { return active && static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x) < n_vecs; };
  auto offset = [&](int j) { return (static_cast<int>(threadIdx.x) + j * static_cast<int>(blockDim.x)) * kVec; };

  // All loads first (the bytes in flight), then the row is held as floats only: keeping packed
  // and unpacked copies alive across the barrier costs registers, and registers cost occupancy.
  V x[kVecsPerThread], r[kVecsPerThread];
#pragma unroll
  for (int j = 0; j < kVecsPerThread; ++j) {
    if (!in_row(j)) continue;
    x[j] = V::load(ptr.x(row) + offset(j));
    if constexpr (kAddResidual) r[j] = V::load(ptr.residual(row) + offset(j));
  }
  float v[kVecsPerThread][kVec];
  float sum_sq = 0.f;
#pragma unroll
  for (int j = 0; j < kVecsPerThread; ++j) {
    if (!in_row(j)) continue;
    if constexpr (kAddResidual) {
      // Round the sum to T, store it, and normalise the rounded value: out == rms_norm(residual).
#pragma unroll
      for (int e = 0; e < kVec; ++e) x[j].v[e] = from_float<T>(to_float(x[j].v[e]) + to_float(r[j].v[e]));
      x[j].store(ptr.residual(row) + offset(j));
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      v[j][e] = to_float(x[j].v[e]);
      sum_sq += v[j][e] * v[j][e];
    }
  }
  const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
  for (int j = 0; j < kVecsPerThread; ++j) {
    if (!in_row(j)) continue;
    // The weight is read after the reduction: holding it in registers from the start costs more
    // occupancy than the L2 round trip it saves.
    const V w = V::load(static_cast<const T*>(p.weight) + offset(j));
    V o;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o.v[e] = from_float<T>(v[j][e] * inv_rms * to_float(w.v[e]));
    o.store(ptr.out(row) + offset(j));
  }
}

template <typename T, bool kAddResidual>
__global__ void __launch_bounds__(1024) rms_norm_long_row_kernel(const RmsNormParams p) {
  constexpr int kVec = kElemsPer16B<T>;
  using V = Vec<T, kVec>;
  const RowPointers<T> ptr{p};
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < p.rows;
  const int n_vecs = static_cast<int>(p.hidden / kVec);

  float sum_sq = 0.f;
  if (active) {
    for (int i = threadIdx.x; i < n_vecs; i += blockDim.x) {
      V v = V::load(ptr.x(row) + i * kVec);
      if constexpr (kAddResidual) {
        const V r = V::load(ptr.residual(row) + i * kVec);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v.v[e] = from_float<T>(to_float(v.v[e]) + to_float(r.v[e]));
        v.store(ptr.residual(row) + i * kVec);
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum_sq += to_float(v.v[e]) * to_float(v.v[e]);
    }
  }
  const float inv_rms = rsqrtf(row_sum(sum_sq) / static_cast<float>(p.hidden) + p.eps);
  if (!active) return;
  // With a residual, read back the rounded sums this same thread stored above.
  const T* src = kAddResidual ? ptr.residual(row) : ptr.x(row);
  for (int i = threadIdx.x; i < n_vecs; i += blockDim.x) {
    const V v = V::load(src + i * kVec);
    const V w = V::load(static_cast<const T*>(p.weight) + i * kVec);
    V o;
#pragma unroll
    for (int e = 0; e < kVec; ++e) o.v[e] = from_float<T>(to_float(v.v[e]) * inv_rms * to_float(w.v[e]));
    o.store(ptr.out(row) + i * kVec);
  }
}

}  // namespace cute_ops
