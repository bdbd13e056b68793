#pragma once
// The input rules of gemm_pair and of the test-support op _hold_sms (common/op_checks.h says how
// rules are kept): called by the CUDA impls (gemm_pair_op.cpp, hold_sms_op.cpp) and the Meta
// impls (gemm_pair_checks.cpp).
#include <ATen/ATen.h>

#include <string>

namespace cute_ops {

// The arguments as the schema takes them: -1 for an automatic split_k0, split_k1 or lag, 0 for an
// automatic block_m.
void check_gemm_pair(const at::Tensor& a, const at::Tensor& b0, const at::Tensor& b1, const std::string& activation,
                     const std::string& policy, const std::string& granularity, int64_t split_k0, int64_t split_k1,
                     int64_t block_m, int64_t lag, const std::string& arch);

// All but the upper bound on num_ctas (the device's SM count), which the CUDA impl checks.
void check_hold_sms(const at::Tensor& control, int64_t num_ctas);

}  // namespace cute_ops
