#pragma once
// RMSNorm over the last dimension, optionally fused with a residual add. Torch-free interface
// between the op glue (rms_norm_op.cpp) and the kernel translation unit (rms_norm.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/dtype.h"

namespace cute_ops {

struct RmsNormParams {
  void* out;                 // [rows, hidden]
  const void* x;             // [rows, hidden]
  void* residual;            // [rows, hidden], updated in place; nullptr for plain rms_norm
  const void* weight;        // [hidden]
  int64_t rows;
  int64_t hidden;            // a multiple of the 16-byte vector width
  int64_t out_row_stride;    // strides in elements, multiples of the vector width
  int64_t x_row_stride;
  int64_t residual_row_stride;
  float eps;
  DType dtype;               // of out, x, residual and weight alike
};

void run_rms_norm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace cute_ops
