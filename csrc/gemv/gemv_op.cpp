// Torch glue for gemv: output allocation, launch, registration. The input rules are in
// gemv_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "gemv/gemv.h"
#include "gemv/gemv_checks.h"

namespace cute_ops {

namespace {

at::Tensor gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                double eps, const std::optional<at::Tensor>& residual, std::string activation) {
  const int64_t cols = check_gemv(x, weight, norm_weight, eps, residual, activation).expect_int();
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(0), cols}, x.options());
  GemvParams p{};
  p.out = out.data_ptr();
  p.x = x.data_ptr();
  p.weight = weight.data_ptr();
  p.norm_weight = norm_weight ? norm_weight->data_ptr() : nullptr;
  p.residual = residual ? residual->data_ptr() : nullptr;
  p.m = static_cast<int>(x.size(0));
  p.k = static_cast<int>(x.size(1));
  p.n = static_cast<int>(weight.size(0));
  p.out_cols = static_cast<int>(cols);
  p.x_row_stride = x.stride(0);
  p.residual_row_stride = residual ? residual->stride(0) : 0;
  p.eps = static_cast<float>(eps);
  p.activation = activation == "swiglu" ? GemvActivation::kSwiGLU : GemvActivation::kNone;
  p.dtype = to_dtype(x.scalar_type(), "gemv", "x");
  run_gemv(p, current_stream(x));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("gemv", &gemv); }

}  // namespace cute_ops
