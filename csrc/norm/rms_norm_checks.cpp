// The input rules of rms_norm and fused_add_rms_norm, and their Meta impls (shape inference for
// meta and fake tensors); compiled into every build. The CPU impls run the same checks, so a CPU
// tensor gets this op's message rather than the dispatcher's.
#include <torch/library.h>

#include "common/op_checks.h"
#include "norm/rms_norm_checks.h"

namespace cute_ops {

namespace {

// x or residual: [..., hidden] with the last dim contiguous, rows one stride apart that keeps
// every row's start 16-byte aligned.
void check_rows(const char* op, const at::Tensor& t, const at::Tensor& x, const char* name) {
  check_device(t, x, op, name, "x");
  check_same_dtype(t, x, op, name, "x");
  TORCH_CHECK_VALUE(t.sym_sizes() == x.sym_sizes(), op, ": ", name, " must have shape ", shape_str(x), ", got ",
                    shape_str(t));
  check_last_dim_contiguous(t, op, name);
  TORCH_CHECK_VALUE(leading_dims_collapse(t, 1), op, ": ", name, "'s leading dims must be viewable as one dim, got ",
                    "strides ", strides_str(t));
  const int vec = elems_per_16_bytes(x.scalar_type());
  TORCH_CHECK_VALUE(t.dim() == 1 || t.sym_stride(-2) % vec == 0, op, ": ", name, "'s row stride (", t.sym_stride(-2),
                    ") must be a multiple of ", vec, " elements for 16-byte accesses");
  check_aligned(t, 16, op, name);
}

at::Tensor rms_norm_meta(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm("rms_norm", x, nullptr, weight, eps);
  return at::empty_symint(x.sym_sizes(), x.options());
}

at::Tensor fused_add_rms_norm_meta(const at::Tensor& x, at::Tensor& residual, const at::Tensor& weight, double eps) {
  check_rms_norm("fused_add_rms_norm", x, &residual, weight, eps);
  return at::empty_symint(x.sym_sizes(), x.options());
}

}  // namespace

void check_rms_norm(const char* op, const at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight,
                    double eps) {
  check_device(x, x, op, "x", "x");
  check_dtype_in(x, {at::kHalf, at::kBFloat16, at::kFloat}, op, "x");
  TORCH_CHECK_VALUE(x.dim() >= 1, op, ": x must have at least 1 dims, got shape ", shape_str(x));
  const int vec = elems_per_16_bytes(x.scalar_type());
  const c10::SymInt hidden = x.sym_size(-1);
  TORCH_CHECK_VALUE(hidden % vec == 0, op, ": hidden size (last dim of x) must be a multiple of ", vec, " for ",
                    dtype_name(x.scalar_type()), " (16-byte vectors), got ", hidden);
  check_rows(op, x, x, "x");
  check_device(weight, x, op, "weight", "x");
  check_same_dtype(weight, x, op, "weight", "x");
  TORCH_CHECK_VALUE(weight.dim() == 1 && weight.sym_size(0) == hidden, op, ": weight must have shape (", hidden,
                    ",), got ", shape_str(weight));
  TORCH_CHECK_VALUE(weight.is_contiguous(), op, ": weight must be contiguous, got strides ", strides_str(weight));
  check_aligned(weight, 16, op, "weight");
  TORCH_CHECK_VALUE(eps >= 0, op, ": eps must be a non-negative float, got ", eps);
  if (residual != nullptr) {
    TORCH_CHECK_VALUE(!residual->is_same(x), op, ": residual and x must be different tensors");
    check_rows(op, *residual, x, "residual");
  }
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) {
  m.impl("rms_norm", &rms_norm_meta);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_meta);
}

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) {
  m.impl("rms_norm", &rms_norm_meta);
  m.impl("fused_add_rms_norm", &fused_add_rms_norm_meta);
}

}  // namespace cute_ops
