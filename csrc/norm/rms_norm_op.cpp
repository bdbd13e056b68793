// Torch glue for rms_norm and fused_add_rms_norm: output allocation, launch, registration. The
// input rules are in rms_norm_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "norm/rms_norm.h"
#include "norm/rms_norm_checks.h"

namespace cute_ops {

namespace {

at::Tensor rms_norm_impl(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& residual,
                         const at::Tensor& weight, double eps) {
  check_rms_norm(op, x, residual ? &*residual : nullptr, weight, eps);  // rms_norm_checks.cpp
  const DType dtype = to_dtype(x.scalar_type(), op, "x");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  RmsNormParams p{};
  p.out = out.data_ptr();
  p.x = x.data_ptr();
  p.residual = residual ? residual->data_ptr() : nullptr;
  p.weight = weight.data_ptr();
  p.rows = x.numel() / x.size(-1);
  p.hidden = x.size(-1);
  p.out_row_stride = p.hidden;
  p.x_row_stride = x.dim() == 1 ? 0 : collapsed_row_stride(x, 1);
  p.residual_row_stride = residual && residual->dim() > 1 ? collapsed_row_stride(*residual, 1) : 0;
  p.eps = static_cast<float>(eps);
  p.dtype = dtype;
  run_rms_norm(p, current_stream(x));
  return out;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return rms_norm_impl("rms_norm", x, std::nullopt, weight, eps);
}

at::Tensor fused_add_rms_norm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  return rms_norm_impl("fused_add_rms_norm", x, residual, weight, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
}

}  // namespace cute_ops
