#pragma once
// The input rules of rotary_embedding (common/op_checks.h says how rules are kept): called by the
// CUDA impl (rotary_op.cpp) and the Meta impl (rotary_checks.cpp).
#include <ATen/ATen.h>

namespace cute_ops {

void check_rotary_embedding(const at::Tensor& q, const at::Tensor& k, const at::Tensor& positions,
                            const at::Tensor& cos_sin_cache);

}  // namespace cute_ops
