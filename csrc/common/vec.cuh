#pragma once
// 16-byte vectors of 16- or 32-bit floats and their float conversions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace cute_ops {

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements of T moved as one access of N * sizeof(T) bytes (16 for the vectorised paths).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];

  __device__ __forceinline__ static Vec load(const T* p) { return *reinterpret_cast<const Vec*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Vec*>(p) = *this; }
};

template <typename T>
constexpr int kElemsPer16B = 16 / static_cast<int>(sizeof(T));

}  // namespace cute_ops

