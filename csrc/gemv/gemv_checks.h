#pragma once
// The input rules of gemv (common/op_checks.h says how rules are kept): called by the CUDA impl
// (gemv_op.cpp) and by the Meta impl (gemv_checks.cpp).
#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace cute_ops {

// Checks every input; returns the output's column count (weight rows, halved for "swiglu").
c10::SymInt check_gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                       double eps, const std::optional<at::Tensor>& residual, const std::string& activation);

}  // namespace cute_ops
