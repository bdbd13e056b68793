#pragma once
// The input rules of rms_norm and fused_add_rms_norm (common/op_checks.h says how rules are kept):
// called by the CUDA impl (rms_norm_op.cpp) and by the Meta impl (rms_norm_checks.cpp).
#include <ATen/ATen.h>

namespace cute_ops {

// residual: nullptr for rms_norm.
void check_rms_norm(const char* op, const at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight,
                    double eps);

}  // namespace cute_ops
