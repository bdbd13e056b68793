#pragma once
// Activations in float32, for kernels that apply them to values already in registers.
#include <cuda_runtime.h>

namespace cute_ops {

// x * sigmoid(x); __expf: the build uses fast math, and its error is far below a 16-bit rounding.
__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }

}  // namespace cute_ops
