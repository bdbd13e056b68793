#pragma once
// Input rules that every attention family shares (flash_fwd, flash_decode): their operands'
// dtype, layout and alignment, the softmax scale, and how the scale reaches the kernels. Built on
// common/op_checks.h; ATen only, no CUDA header, so the families' <family>_checks.cpp use it in
// every build.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>

#include "common/op_checks.h"

namespace cute_ops {

// "[batch, seqlen_q, heads_q, head_dim]": an operand's dims by name, for messages.
inline std::string dims_str(std::initializer_list<const char*> names) {
  std::string s = "[";
  for (const char* n : names) s += (s.size() > 1 ? ", " : "") + std::string(n);
  return s + "]";
}

// An operand of an attention kernel, which copies 16-byte vectors from every row and head: on q's
// device with q's dtype (q itself must be fp16 or bf16), or with `dtype` when given (an fp8 KV
// cache), the dims `names` lists, last dim contiguous, every other stride a multiple of 16 bytes,
// data 16-byte aligned.
inline void check_attention_operand(const at::Tensor& t, const at::Tensor& q, const char* op, const char* name,
                                    std::initializer_list<const char*> names,
                                    std::optional<at::ScalarType> dtype = std::nullopt) {
  check_device(t, q, op, name, "q");
  if (t.is_same(q)) {
    check_dtype_in(q, {at::kHalf, at::kBFloat16}, op, "q");
  } else if (dtype) {
    check_dtype_in(t, {*dtype}, op, name);
  } else {
    check_same_dtype(t, q, op, name, "q");
  }
  TORCH_CHECK_VALUE(t.dim() == static_cast<int64_t>(names.size()), op, ": ", name, " must be ", dims_str(names),
                    ", got shape ", shape_str(t));
  check_last_dim_contiguous(t, op, name);
  const int64_t align_elems = 16 / static_cast<int64_t>(t.element_size());
  for (int64_t i = 0; i + 1 < t.dim(); ++i) {
    TORCH_CHECK_VALUE(t.sym_stride(i) % align_elems == 0, op, ": ", name, "'s strides (all but the last) must be ",
                      "multiples of ", align_elems, " elements (16 bytes), got strides ", strides_str(t));
  }
  check_aligned(t, 16, op, name);
}

// An int32 tensor of device data (lengths, offsets, a block table) with `dims` dims, on q's device.
inline void check_int32_operand(const at::Tensor& t, const at::Tensor& q, const char* op, const char* name,
                                int64_t dims) {
  check_device(t, q, op, name, "q");
  check_dtype_in(t, {at::kInt}, op, name);
  check_dims(t, dims, op, name);
}

inline void check_softmax_scale(std::optional<double> softmax_scale, const char* op) {
  TORCH_CHECK_VALUE(!softmax_scale || std::isfinite(*softmax_scale), op,
                    ": softmax_scale must be a finite float, or None for 1/sqrt(head_dim), got ", *softmax_scale);
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
  check_softmax_scale(softmax_scale, op);
  const double scale = softmax_scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  return {static_cast<float>(std::abs(scale)),
          std::max(static_cast<float>(std::abs(scale) * 1.4426950408889634), 1e-30f),  // log2(e)
          scale < 0};
}

}  // namespace cute_ops
