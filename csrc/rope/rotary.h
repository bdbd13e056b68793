#pragma once
// Rotate-half (LLaMA / GPT-NeoX) rotary embedding applied in place to q and k. Torch-free interface
// between the op glue (rotary_op.cpp) and the kernel translation unit (rotary.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/device_errors.h"
#include "common/dtype.h"

namespace cute_ops {

struct RotaryParams {
  void* q;                      // [tokens, hq, head_dim], element strides below
  void* k;                      // [tokens, hkv, head_dim]
  const void* positions;        // [tokens], int32 or int64
  const void* cos_sin;          // [max_position, rot_dim]: cos in [0, rot_dim/2), sin after
  int64_t max_position;         // rows of cos_sin: a position outside [0, max_position) is reported
  DeviceErrorSink errors;       // (common/device_errors.h) and that token's q and k become NaN
  int64_t tokens;
  int hq, hkv, head_dim, rot_dim;  // rot_dim <= head_dim, even: the first rot_dim dims rotate
  int64_t q_token_stride, q_head_stride;
  int64_t k_token_stride, k_head_stride;
  DType dtype;                  // of q and k
  DType cache_dtype;            // float32, or the dtype of q
  bool positions_int64;
  bool vectorized;              // 16-byte accesses: the glue checked alignment and divisibility
};

void run_rotary(const RotaryParams& params, cudaStream_t stream);

}  // namespace cute_ops
