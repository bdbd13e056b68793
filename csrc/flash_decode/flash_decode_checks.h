#pragma once
// The input rules of flash_decode (common/op_checks.h says how rules are kept): called by the CUDA
// impl (flash_decode_op.cpp) and the Meta impl (flash_decode_checks.cpp). Values that live on the
// device (lengths, block table entries) are the kernels' to check (cache_access.h).
#include <ATen/ATen.h>

#include <optional>

namespace cute_ops {

void check_flash_decode(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                        const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& k_new,
                        const std::optional<at::Tensor>& v_new, const std::optional<at::Tensor>& block_table,
                        const std::optional<at::Tensor>& rotary_cos, const std::optional<at::Tensor>& rotary_sin,
                        std::optional<double> softmax_scale, int64_t num_splits,
                        const std::optional<at::Tensor>& k_scale, const std::optional<at::Tensor>& v_scale);

}  // namespace cute_ops
