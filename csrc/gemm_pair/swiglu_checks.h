#pragma once
// The input rules of swiglu (common/op_checks.h says how rules are kept): called by its CUDA impl
// (swiglu_op.cpp) and its Meta impl (swiglu_checks.cpp).
#include <ATen/ATen.h>

namespace cute_ops {

void check_swiglu(const at::Tensor& gate_up);

}  // namespace cute_ops
