#pragma once
// The input rules of peer_all_reduce (common/op_checks.h says how rules are kept): called by the
// CUDA impl (peer_all_reduce_op.cpp) and by the Meta and CPU impls (peer_all_reduce_checks.cpp).
#include <ATen/ATen.h>

namespace cute_ops {

void check_peer_all_reduce(const at::Tensor& x, const at::Tensor& workspace, c10::IntArrayRef workspaces,
                           int64_t rank);

}  // namespace cute_ops
