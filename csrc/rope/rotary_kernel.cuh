#pragma once
// One CTA per token. A unit of work is kVec consecutive pairs (x[i], x[i + rot_dim/2]) of one
// head, so a thread moves 2 x 16 bytes of q or k per unit; the token's cos/sin row is shared by
// all its heads and is served from L1. A position outside the table is reported
// (common/device_errors.h) and the token's rotated dims become NaN, never an out-of-bounds read.
#include "common/vec.cuh"
#include "rope/rotary.h"

namespace cute_ops {

template <typename CacheT, int kVec>
__device__ __forceinline__ void load_cache(const CacheT* src, float (&dst)[kVec]) {
  constexpr int kCacheVec = kElemsPer16B<CacheT>;
  if constexpr (kVec % kCacheVec == 0) {
#pragma unroll
    for (int j = 0; j < kVec / kCacheVec; ++j) {
      const auto v = Vec<CacheT, kCacheVec>::load(src + j * kCacheVec);
#pragma unroll
      for (int e = 0; e < kCacheVec; ++e) dst[j * kCacheVec + e] = to_float(v.v[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) dst[e] = to_float(src[e]);
  }
}

template <typename T, typename CacheT, typename PosT, int kVec>
__global__ void rotary_kernel(const RotaryParams p) {
  using V = Vec<T, kVec>;
  const int64_t token = blockIdx.x;
  const int64_t pos = static_cast<const PosT*>(p.positions)[token];
  const int half = p.rot_dim / 2;
  const int chunks = half / kVec;
  const int units = (p.hq + p.hkv) * chunks;
  T* q = static_cast<T*>(p.q) + token * p.q_token_stride;
  T* k = static_cast<T*>(p.k) + token * p.k_token_stride;
  // Unit u: kVec pairs of one head, x1 at column c of the head, x2 half a rotation further.
  auto first_half = [&](int u, int& c) -> T* {
    const int head = u / chunks;
    c = (u - head * chunks) * kVec;
    return head < p.hq ? q + head * p.q_head_stride + c : k + (head - p.hq) * p.k_head_stride + c;
  };

  if (pos < 0 || pos >= p.max_position) {
    // Kept apart from the rotation loop below: sharing its code raised the loop's registers
    // (30-36 to 46-56) and cost 5% of bandwidth through occupancy.
    if (threadIdx.x == 0) {
      report_device_error(p.errors, DeviceErrorOp::kRotaryEmbedding, DeviceErrorCode::kRotaryPosition, token, pos,
                          p.max_position);
    }
    V nan;
#pragma unroll
    for (int e = 0; e < kVec; ++e) nan.v[e] = from_float<T>(NAN);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      int c;
      T* x1 = first_half(u, c);
      nan.store(x1);
      nan.store(x1 + half);
    }
    return;
  }

  const CacheT* cos_row = static_cast<const CacheT*>(p.cos_sin) + pos * p.rot_dim;
  const CacheT* sin_row = cos_row + half;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    int c;
    T* x1 = first_half(u, c);
    T* x2 = x1 + half;
    float cos_v[kVec], sin_v[kVec];
    load_cache<CacheT, kVec>(cos_row + c, cos_v);
    load_cache<CacheT, kVec>(sin_row + c, sin_v);
    const V a = V::load(x1);
    const V b = V::load(x2);
    V ra, rb;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float fa = to_float(a.v[e]), fb = to_float(b.v[e]);
      ra.v[e] = from_float<T>(fa * cos_v[e] - fb * sin_v[e]);
      rb.v[e] = from_float<T>(fb * cos_v[e] + fa * sin_v[e]);
    }
    ra.store(x1);
    rb.store(x2);
  }
}

}  // namespace cute_ops
