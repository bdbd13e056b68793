#pragma once
// The input rules of l2_prefetch (common/op_checks.h says how rules are kept): called by the CUDA
// impl (l2_prefetch_op.cpp) and by the Meta and CPU impls (l2_prefetch_checks.cpp).
#include <ATen/ATen.h>

namespace cute_ops {

void check_l2_prefetch(const at::Tensor& t, int64_t bytes);

}  // namespace cute_ops
