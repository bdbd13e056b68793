// Torch glue for rms_norm and fused_add_rms_norm: checks, output allocation, launch, registration.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "norm/rms_norm.h"

namespace cute_ops {

namespace {

struct Rows {
  int64_t rows;
  int64_t stride;
};

Rows check_rows(const at::Tensor& t, const at::Tensor& x, int vec, const char* op, const char* arg) {
  check_cuda_tensor(t, op, arg);
  check_same_device(x, t, op, arg);
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), op, ": ", arg, " has dtype ", t.scalar_type(),
              ", expected ", x.scalar_type(), " like x");
  TORCH_CHECK(t.sizes() == x.sizes(), op, ": ", arg, " has shape ", t.sizes(), ", expected ", x.sizes());
  TORCH_CHECK(t.stride(-1) == 1, op, ": ", arg, "'s last dim must be contiguous, got strides ", t.strides());
  const int64_t stride = collapsed_row_stride(t, 1);
  TORCH_CHECK(stride >= 0, op, ": ", arg, "'s leading dims must be viewable as one dim, got strides ",
              t.strides());
  TORCH_CHECK(t.dim() == 1 || stride % vec == 0, op, ": ", arg, "'s row stride (", stride,
              ") must be a multiple of ", vec, " elements for 16-byte accesses");
  check_aligned(t, 16, op, arg);
  return {t.numel() / t.size(-1), stride};
}

at::Tensor rms_norm_impl(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& residual,
                         const at::Tensor& weight, double eps) {
  check_cuda_tensor(x, op, "x");
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dim");
  const DType dtype = to_dtype(x.scalar_type(), op, "x");
  const int vec = rms_norm_vector_width(dtype);
  const int64_t hidden = x.size(-1);
  TORCH_CHECK(hidden % vec == 0, op, ": hidden size (last dim of x) must be a multiple of ", vec,
              " for ", dtype_name(dtype), " (16-byte vectors), got ", hidden);
  check_cuda_tensor(weight, op, "weight");
  check_same_device(x, weight, op, "weight");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == hidden, op, ": weight must have shape [", hidden,
              "], got ", weight.sizes());
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(), op, ": weight has dtype ", weight.scalar_type(),
              ", expected ", x.scalar_type(), " like x");
  TORCH_CHECK(weight.is_contiguous(), op, ": weight must be contiguous");
  check_aligned(weight, 16, op, "weight");

  const Rows xr = check_rows(x, x, vec, op, "x");
  Rows rr{0, 0};
  if (residual) rr = check_rows(*residual, x, vec, op, "residual");

  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty(x.sizes(), x.options());
  RmsNormParams p{};
  p.out = out.data_ptr();
  p.x = x.data_ptr();
  p.residual = residual ? residual->data_ptr() : nullptr;
  p.weight = weight.data_ptr();
  p.rows = xr.rows;
  p.hidden = hidden;
  p.out_row_stride = hidden;
  p.x_row_stride = x.dim() == 1 ? 0 : xr.stride;
  p.residual_row_stride = residual && residual->dim() > 1 ? rr.stride : 0;
  p.eps = static_cast<float>(eps);
  p.dtype = dtype;
  run_rms_norm(p, current_stream(x));
  return out;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return rms_norm_impl("rms_norm", x, std::nullopt, weight, eps);
}

at::Tensor fused_add_rms_norm(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  TORCH_CHECK(!residual.is_same(x), "fused_add_rms_norm: residual and x must be different tensors");
  return rms_norm_impl("fused_add_rms_norm", x, residual, weight, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm);
}

}  // namespace cute_ops
