#pragma once
// The input rules of flash_fwd and flash_fwd_varlen (common/op_checks.h says how rules are kept):
// called by the CUDA impls (flash_fwd_op.cpp) and the Meta impls (flash_fwd_checks.cpp).
#include <ATen/ATen.h>

#include <optional>
#include <string>

namespace cute_ops {

void check_flash_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     std::optional<double> softmax_scale, const std::string& arch);

void check_flash_fwd_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                            int64_t max_seqlen_k, std::optional<double> softmax_scale, const std::string& arch);

}  // namespace cute_ops
