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

// k-splits (an experiment behind CUTE_OPS_GEMV_K_SPLITS, gemv_kernel.cuh): each unit's k steps in
// k_splits equal slices, each slice a CTA's piece of work; the CTA that finishes a unit's last
// slice adds the slices' float32 sums in slice order. A second kernel argument, so that the plain
// kernel's parameters (and code) stay as they are.
struct GemvSplitParams {
  int k_splits = 1;           // 1: a unit's k in one CTA
  float* sums = nullptr;      // [units * k_splits][32 lanes][4]: warp 0's sums of each slice
  float* sum_sq = nullptr;    // [units * k_splits][kGemvMaxRows]: with a norm, each slice's sums of x^2
  int* counters = nullptr;    // [units], zero at the launch and left zero (common/arrival_counters.h)
};

// How run_gemv should split k for these params (plain calls only; an exchange never splits) and
// the workspace that needs. k_splits is 1 unless the build has CUTE_OPS_GEMV_K_SPLITS.
struct GemvSplitPlan {
  int k_splits = 1;
  int64_t units = 0;          // GemvSplitParams::counters' length
  int64_t sum_floats = 0;     // GemvSplitParams::sums' length
  int64_t sum_sq_floats = 0;  // GemvSplitParams::sum_sq's length
};
GemvSplitPlan gemv_split_plan(const GemvParams& params, int device);

// exchange.mode kNone: the plain gemv. Tensor parallelism (gemv_exchange.h): kPush sends the
// output rows to every rank's exchange buffer instead of `out`; kPull reads x as the sum of the
// ranks' pushed rows instead of `x`.
void run_gemv(const GemvParams& params, cudaStream_t stream, const GemvExchangeParams& exchange = {},
              const GemvSplitParams& split = {});

}  // namespace cute_ops
