#pragma once
// gemv: out = act(norm(x) @ weight^T) (+ residual) for the few rows of a decode batch. Torch-free
// interface between the op glue (gemv_op.cpp) and the kernel translation unit (gemv.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"
#include "gemv/gemv_exchange.h"
#include "gemv/gemv_limits.h"

namespace cute_ops {

enum class GemvActivation : int8_t { kNone, kSwiGLU };

struct GemvParams {
  void* out;                  // [m, out_cols], contiguous
  const void* x;              // [m, k]
  const void* weight;         // [n, k], contiguous; for kSwiGLU packed by pack_gate_up, n = 2 * out_cols
  const void* norm_weight;    // [k]: x is rms-normalised first; nullptr: x as is
  const void* residual;       // [m, out_cols]: added after rounding; nullptr: none
  int m;                      // 1 .. kGemvMaxRows
  int k;                      // a multiple of 8
  int n;                      // rows of weight
  int out_cols;               // n, or n / 2 for kSwiGLU
  int64_t x_row_stride;       // in elements, a multiple of 8
  int64_t residual_row_stride;
  float eps;
  GemvActivation activation;
  DType dtype;                // of every tensor (float16 or bfloat16)
};

// exchange.mode kNone: the plain gemv. Tensor parallelism (gemv_exchange.h): kPush sends the
// output rows to every rank's exchange buffer instead of `out`; kPull reads x as the sum of the
// ranks' pushed rows instead of `x`.
void run_gemv(const GemvParams& params, cudaStream_t stream, const GemvExchangeParams& exchange = {});

}  // namespace cute_ops
