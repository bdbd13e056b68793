#pragma once
// Shared checks and conversions for the torch-side glue of every op (*_op.cpp files).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "common/dtype.h"
#include "common/op_checks.h"

namespace cute_ops {

inline DType to_dtype(at::ScalarType t, const char* op, const char* arg) {
  switch (t) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    default:
      TORCH_CHECK(false, op, ": ", arg, " must be float16, bfloat16 or float32, got ", t);
  }
}

inline void check_cuda_tensor(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.is_cuda(), op, ": ", arg, " must be a CUDA tensor, got device ", t.device());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* arg) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", arg, " is on ", b.device(), " but the inputs are on ",
              a.device());
}

// An fp16/bf16 CUDA operand on `ref`'s device with `ref`'s dtype (`ref_name` names ref in the message).
inline void check_half_operand(const at::Tensor& t, const at::Tensor& ref, const char* op, const char* name,
                               const char* ref_name) {
  check_cuda_tensor(t, op, name);
  check_same_device(ref, t, op, name);
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, op, ": ", name,
              " must be float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", name, " has dtype ", t.scalar_type(), ", ", ref_name,
              " has ", ref.scalar_type());
}

// Stride, in elements, between consecutive rows when all leading dims of `t` collapse into one
// row index (as a view, without a copy); -1 if they do not.
inline int64_t collapsed_row_stride(const at::Tensor& t, int64_t inner_dims) {
  const int64_t lead = t.dim() - inner_dims;
  if (lead <= 0) return 0;
  for (int64_t d = 0; d + 1 < lead; ++d) {
    if (t.size(d) > 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return -1;
  }
  return t.stride(lead - 1);
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace cute_ops
