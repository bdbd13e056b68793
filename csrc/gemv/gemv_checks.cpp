// The input rules of gemv and its Meta impl (shape inference for meta and fake tensors); compiled
// into every build. The CPU impl runs the same checks, so a CPU tensor gets this op's message.
#include <torch/library.h>

#include "common/op_checks.h"
#include "common/peer_layout.h"
#include "common/peer_workspace_checks.h"
#include "gemv/gemv_exchange.h"
#include "gemv/gemv_limits.h"
#include "gemv/gemv_checks.h"

namespace cute_ops {

namespace {

// weight [n, k], norm_weight [k] and the activation, against `ref` (x, or a pull's weight itself)
// for device and dtype; returns the output's column count.
c10::SymInt check_weights(const char* op, const at::Tensor& ref, const char* ref_name, const c10::SymInt& k,
                          const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight, double eps,
                          const std::string& activation) {
  check_device(weight, ref, op, "weight", ref_name);
  check_same_dtype(weight, ref, op, "weight", ref_name);
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
    check_device(*norm_weight, ref, op, "norm_weight", ref_name);
    check_same_dtype(*norm_weight, ref, op, "norm_weight", ref_name);
    TORCH_CHECK_VALUE(norm_weight->dim() == 1 && norm_weight->sym_size(0) == k, op, ": norm_weight must have shape (",
                      k, ",), got ", shape_str(*norm_weight));
    TORCH_CHECK_VALUE(norm_weight->is_contiguous(), op, ": norm_weight must be contiguous");
    check_aligned(*norm_weight, 16, op, "norm_weight");
    TORCH_CHECK_VALUE(eps >= 0, op, ": eps must be a non-negative float, got ", eps);
  }
  return cols;
}

}  // namespace

c10::SymInt check_gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                       double eps, const std::optional<at::Tensor>& residual, const std::string& activation,
                       const char* op) {
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

  const c10::SymInt cols = check_weights(op, x, "x", k, weight, norm_weight, eps, activation);
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

void check_gemv_exchange(const char* op, const at::Tensor& exchange, const at::Tensor& like, int64_t world,
                         int64_t rank, int64_t slots, int64_t slot, const c10::SymInt& hidden) {
  TORCH_CHECK_VALUE(world >= 1 && world <= kGemvMaxRanks, op, ": an exchange joins 1 to ", kGemvMaxRanks,
                    " ranks, got ", world);
  TORCH_CHECK_VALUE(rank >= 0 && rank < world, op, ": rank must be in [0, ", world, "), got ", rank);
  TORCH_CHECK_VALUE(slot >= 0 && slot < slots, op, ": slot must be in [0, ", slots, ") (the exchange's slots), got ",
                    slot);
  TORCH_CHECK_VALUE(hidden % 8 == 0, op, ": the exchanged rows' width must be a multiple of 8, got ", hidden);
  check_device(exchange, like, op, "exchange", "the operands");
  TORCH_CHECK_VALUE(exchange.scalar_type() == at::kByte && exchange.dim() == 1 && exchange.is_contiguous(), op,
                    ": exchange must be the uint8 buffer of gemv_exchange_buffer");
  const GemvExchangeLayout layout{slots, world, hidden.guard_int(__FILE__, __LINE__),
                                  static_cast<int64_t>(c10::elementSize(like.scalar_type()))};
  TORCH_CHECK_VALUE(exchange.sym_size(0) == layout.bytes(), op, ": exchange has ", exchange.sym_size(0), " bytes; ",
                    slots, " slots of ", hidden, " ", like.scalar_type(), " columns over ", world, " ranks take ",
                    layout.bytes(), " (make it with gemv_exchange_buffer and the same sizes)");
}

c10::SymInt check_gemv_pull(const at::Tensor& exchange, int64_t world, int64_t rank, int64_t slots, int64_t slot,
                            int64_t m, const at::Tensor& weight, const at::Tensor& norm_weight, double eps,
                            const std::string& activation, const std::optional<at::Tensor>& x_sum) {
  const char* op = "gemv_pull";
  TORCH_CHECK_VALUE(m >= 1 && m <= kGemvMaxRows, op, ": m must be 1 to ", kGemvMaxRows, ", got ", m);
  check_dtype_in(weight, {at::kHalf, at::kBFloat16}, op, "weight");
  check_dims(weight, 2, op, "weight");
  const c10::SymInt k = weight.sym_size(1);
  TORCH_CHECK_VALUE(k % 8 == 0, op, ": weight's columns (k) must be a multiple of 8, got ", k);
  const c10::SymInt cols = check_weights(op, weight, "weight", k, weight, norm_weight, eps, activation);
  check_gemv_exchange(op, exchange, weight, world, rank, slots, slot, k);
  if (x_sum) {
    check_device(*x_sum, weight, op, "x_sum", "weight");
    check_same_dtype(*x_sum, weight, op, "x_sum", "weight");
    TORCH_CHECK_VALUE(x_sum->dim() == 2 && x_sum->sym_size(0) == m && x_sum->sym_size(1) == k &&
                      x_sum->is_contiguous(), op, ": x_sum must be a contiguous [", m, ", ", k, "] tensor, got shape ",
                      shape_str(*x_sum));
    check_aligned(*x_sum, 16, op, "x_sum");
  }
  return cols;
}

void check_gemv_push(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
                     const at::Tensor& exchange, c10::IntArrayRef buffers, int64_t rank, int64_t slots, int64_t slot) {
  const char* op = "gemv_push";
  const c10::SymInt cols = check_gemv(x, weight, std::nullopt, 0.0, residual, "none", op);
  check_gemv_exchange(op, exchange, x, static_cast<int64_t>(buffers.size()), rank, slots, slot, cols);
}

c10::SymInt check_gemv_push_lines(const at::Tensor& x, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& residual, const at::Tensor& workspace,
                                  c10::IntArrayRef workspaces, int64_t rank) {
  const char* op = "gemv_push_lines";
  const c10::SymInt cols = check_gemv(x, weight, std::nullopt, 0.0, residual, "none", op);
  // A line is 8 bytes of the output: 4 columns of one row (the lines of a row are whole).
  TORCH_CHECK_VALUE(cols % 4 == 0, op, ": the output's columns (weight rows) must be a multiple of 4 (an 8-byte "
                    "line of peer_all_reduce holds 4), got ", cols);
  const c10::SymInt bytes = x.sym_size(0) * cols * static_cast<int64_t>(x.element_size());
  TORCH_CHECK_VALUE(bytes <= kPeerMaxBytes, op, ": the output holds ", bytes, " bytes, more than the ", kPeerMaxBytes,
                    " one peer_all_reduce call takes");
  check_peer_workspace(workspace, workspaces, rank, x, op, "x");  // common/peer_workspace_checks.cpp
  return cols;
}

GemvExchangeLayout check_gemv_exchange_buffer(const at::Tensor& like, int64_t slots, int64_t world, int64_t hidden) {
  const char* op = "gemv_exchange_buffer";
  TORCH_CHECK_VALUE(like.is_cuda() || like.is_meta(), op, ": like must be a CUDA tensor (on the GPU of the "
                    "exchanged rows), got device ", like.device());
  check_dtype_in(like, {at::kHalf, at::kBFloat16}, op, "like");
  TORCH_CHECK_VALUE(slots >= 1 && world >= 1 && world <= kGemvMaxRanks && hidden >= 8 && hidden % 8 == 0, op,
                    ": need slots >= 1, 1 <= world <= ", kGemvMaxRanks, " and hidden a positive multiple of 8, got ",
                    slots, ", ", world, ", ", hidden);
  return GemvExchangeLayout{slots, world, hidden, static_cast<int64_t>(c10::elementSize(like.scalar_type()))};
}

void check_gemv_exchange_handle(const at::Tensor& buffer) {
  TORCH_CHECK_VALUE((buffer.is_cuda() || buffer.is_meta()) && buffer.scalar_type() == at::kByte && buffer.dim() == 1,
                    "gemv_exchange_handle: buffer must be the uint8 CUDA tensor of gemv_exchange_buffer");
}

void check_gemv_exchange_open(const at::Tensor& buffer, const at::Tensor& handle) {
  check_gemv_exchange_handle(buffer);
  TORCH_CHECK_VALUE(handle.device().is_cpu() && handle.scalar_type() == at::kByte &&
                    handle.numel() == kGemvIpcHandleBytes && handle.is_contiguous(),
                    "gemv_exchange_open: handle must be the ", kGemvIpcHandleBytes,
                    " CPU bytes of gemv_exchange_handle");
}

namespace {

at::Tensor gemv_exchange_buffer_meta(const at::Tensor& like, int64_t slots, int64_t world, int64_t hidden) {
  const GemvExchangeLayout layout = check_gemv_exchange_buffer(like, slots, world, hidden);
  return at::empty({layout.bytes()}, like.options().dtype(at::kByte));
}

at::Tensor gemv_exchange_handle_meta(const at::Tensor& buffer) {
  check_gemv_exchange_handle(buffer);
  return at::empty({kGemvIpcHandleBytes}, at::TensorOptions().dtype(at::kByte));  // on the CPU, as the op's
}

at::Tensor gemv_exchange_open_meta(const at::Tensor& buffer, const at::Tensor& handle) {
  check_gemv_exchange_open(buffer, handle);
  return at::empty_like(buffer);
}

at::Tensor gemv_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                     double eps, const std::optional<at::Tensor>& residual, std::string activation) {
  const c10::SymInt cols = check_gemv(x, weight, norm_weight, eps, residual, activation);
  return at::empty_symint({x.sym_size(0), cols}, x.options());
}

at::Tensor gemv_pull_meta(const at::Tensor& exchange, int64_t world, int64_t rank, int64_t slots, int64_t slot, int64_t m,
                          const at::Tensor& weight, const at::Tensor& norm_weight, double eps, std::string activation,
                          const std::optional<at::Tensor>& x_sum) {
  const c10::SymInt cols = check_gemv_pull(exchange, world, rank, slots, slot, m, weight, norm_weight, eps, activation,
                                           x_sum);
  return at::empty_symint({c10::SymInt(m), cols}, weight.options());
}

at::Tensor gemv_push_lines_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
                                const at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank) {
  const c10::SymInt cols = check_gemv_push_lines(x, weight, residual, workspace, workspaces, rank);
  return at::empty_symint({x.sym_size(0), cols}, x.options());
}

void gemv_push_meta(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
                    const at::Tensor& exchange, c10::IntArrayRef buffers, int64_t rank, int64_t slots, int64_t slot) {
  check_gemv_push(x, weight, residual, exchange, buffers, rank, slots, slot);
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) {
  m.impl("gemv", &gemv_meta);
  m.impl("gemv_pull", &gemv_pull_meta);
  m.impl("gemv_push", &gemv_push_meta);
  m.impl("gemv_push_lines", &gemv_push_lines_meta);
  m.impl("gemv_exchange_buffer", &gemv_exchange_buffer_meta);
  m.impl("gemv_exchange_handle", &gemv_exchange_handle_meta);
  m.impl("gemv_exchange_open", &gemv_exchange_open_meta);
}

// CPU: the checks' messages (a CPU `like` or buffer is refused by them).
TORCH_LIBRARY_IMPL(cute_ops, CPU, m) {
  m.impl("gemv", &gemv_meta);
  m.impl("gemv_pull", &gemv_pull_meta);
  m.impl("gemv_push", &gemv_push_meta);
  m.impl("gemv_push_lines", &gemv_push_lines_meta);
  m.impl("gemv_exchange_buffer", &gemv_exchange_buffer_meta);
  m.impl("gemv_exchange_handle", &gemv_exchange_handle_meta);
}

}  // namespace cute_ops
