#pragma once
// Sum reductions over a group of `width` consecutive lanes (width a power of two <= 32).
namespace cute_ops {

__device__ __forceinline__ float warp_sum(float v, int width = 32) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    // Offsets >= width would mix neighbouring groups; every lane still takes part in the shuffle.
    if (offset < width) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

}  // namespace cute_ops
