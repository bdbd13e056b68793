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

// An fp16/bf16 operand of the attention kernels, which copy 16-byte vectors from every row and
// head: on q's device with q's dtype, `dims` dims, last dim contiguous, other strides multiples of
// 8 elements, data 16-byte aligned.
inline void check_attention_tensor(const at::Tensor& t, const at::Tensor& q, const char* op, const char* name,
                                   int64_t dims) {
  constexpr int64_t kAlignElems = 8;
  check_half_operand(t, q, op, name, "q");
  TORCH_CHECK(t.dim() == dims, op, ": ", name, " must have ", dims, " dims, got shape ", t.sizes());
  TORCH_CHECK(t.stride(-1) == 1, op, ": ", name, "'s last dim must be contiguous, got strides ", t.strides());
  for (int64_t i = 0; i + 1 < dims; ++i) {
    TORCH_CHECK(t.stride(i) % kAlignElems == 0, op, ": ", name, "'s strides must be multiples of ", kAlignElems,
                " elements (16 bytes), got ", t.strides());
  }
  check_aligned(t, 16, op, name);
}

// The softmax scale as the attention kernels take it. Their online softmax subtracts the max of
// the raw scores, which is the max of the scaled ones only for a positive scale: a negative scale
// is applied as |scale| to -q (negate_q), and 0 as 1e-30 in the log2 domain, far below any score's
// resolution, so that masked -inf scores still give exp2(-inf) = 0 rather than NaN.
struct AttentionScale {
  float scale;       // |scale|
  float scale_log2;  // |scale| * log2(e), at least 1e-30
  bool negate_q;
};

inline AttentionScale attention_scale(const char* op, std::optional<double> softmax_scale, int64_t head_dim) {
  TORCH_CHECK(!softmax_scale || std::isfinite(*softmax_scale), op, ": softmax_scale must be finite, got ",
              *softmax_scale);
  const double scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return {static_cast<float>(std::abs(scale)),
          std::max(static_cast<float>(std::abs(scale) * 1.4426950408889634), 1e-30f),  // log2(e)
          scale < 0};
}

inline cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace cute_ops
