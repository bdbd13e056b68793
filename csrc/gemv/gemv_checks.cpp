// The input rules of gemv and its Meta impl (shape inference for meta and fake tensors); compiled
// into every build. The CPU impl runs the same checks, so a CPU tensor gets this op's message.
#include <torch/library.h>

#include "common/op_checks.h"
#include "gemv/gemv_limits.h"
#include "gemv/gemv_checks.h"

namespace cute_ops {

c10::SymInt check_gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                       double eps, const std::optional<at::Tensor>& residual, const std::string& activation) {
  const char* op = "gemv";
  check_device(x, x, op, "x", "x");
  check_dtype_in(x, {at::kHalf, at::kBFloat16}, op, "x");
  check_dims(x, 2, op, "x");
  TORCH_CHECK_VALUE(x.sym_size(0) <= kGemvMaxRows, op, ": x may have at most ", kGemvMaxRows,
                    " rows (a decode batch; use torch.nn.functional.linear for more), got ", x.sym_size(0));
  const c10::SymInt k = x.sym_size(1);
  TORCH_CHECK_VALUE(k > 0 && k % 8 == 0, op, ": x's last dim (k) must be a positive multiple of 8 (16-byte "
                    "vectors), got ", k);
  check_last_dim_contiguous(x, op, "x");
  TORCH_CHECK_VALUE(x.sym_size(0) <= 1 || x.sym_stride(0) % 8 == 0, op, ": x's row stride (", x.sym_stride(0),
                    ") must be a multiple of 8 elements for 16-byte accesses");
  check_aligned(x, 16, op, "x");

  check_device(weight, x, op, "weight", "x");
  check_same_dtype(weight, x, op, "weight", "x");
  check_dims(weight, 2, op, "weight");
  TORCH_CHECK_VALUE(weight.sym_size(1) == k, op, ": weight must be [n, ", k, "] (k of x), got shape ",
                    shape_str(weight));
  TORCH_CHECK_VALUE(weight.is_contiguous(), op, ": weight must be contiguous, got strides ", strides_str(weight));
  check_aligned(weight, 16, op, "weight");
  TORCH_CHECK_VALUE(weight.sym_size(0) > 0 && weight.sym_size(0) < (int64_t{1} << 31), op, ": weight must have between 1 and 2^31 - 1 rows, got shape ", shape_str(weight));

  TORCH_CHECK_VALUE(activation == "none" || activation == "swiglu", op,
                    ": activation must be \"none\" or \"swiglu\", got \"", activation, "\"");
  c10::SymInt cols = weight.sym_size(0);
  if (activation == "swiglu") {
    TORCH_CHECK_VALUE(cols % 2 == 0, op, ": \"swiglu\" needs weight's rows to be gate and up rows packed by "
                      "pack_gate_up (an even count), got ", cols);
    cols = cols / 2;
  }

  if (norm_weight) {
    check_device(*norm_weight, x, op, "norm_weight", "x");
    check_same_dtype(*norm_weight, x, op, "norm_weight", "x");
    TORCH_CHECK_VALUE(norm_weight->dim() == 1 && norm_weight->sym_size(0) == k, op, ": norm_weight must have shape (",
                      k, ",), got ", shape_str(*norm_weight));
    TORCH_CHECK_VALUE(norm_weight->is_contiguous(), op, ": norm_weight must be contiguous");
    check_aligned(*norm_weight, 16, op, "norm_weight");
    TORCH_CHECK_VALUE(eps >= 0, op, ": eps must be a non-negative float, got ", eps);
  }
  if (residual) {
    check_device(*residual, x, op, "residual", "x");
    check_same_dtype(*residual, x, op, "residual", "x");
    TORCH_CHECK_VALUE(residual->dim() == 2 && residual->sym_size(0) == x.sym_size(0) && residual->sym_size(1) == cols,
                      op, ": residual must have shape (", x.sym_size(0), ", ", cols, ") (rows of x, output columns), "
                      "got ", shape_str(*residual));
    check_last_dim_contiguous(*residual, op, "residual");
  }
  return cols;
}

namespace {

at::Tensor gemv_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                     double eps, const std::optional<at::Tensor>& residual, std::string activation) {
  const c10::SymInt cols = check_gemv(x, weight, norm_weight, eps, residual, activation);
  return at::empty_symint({x.sym_size(0), cols}, x.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("gemv", &gemv_meta); }

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("gemv", &gemv_meta); }

}  // namespace cute_ops
