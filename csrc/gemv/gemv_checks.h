#pragma once
// The input rules of gemv (common/op_checks.h says how rules are kept): called by the CUDA impl
// (gemv_op.cpp) and by the Meta impl (gemv_checks.cpp).
#include <ATen/ATen.h>

#include <c10/util/ArrayRef.h>

#include <optional>
#include <string>

#include "gemv/gemv_exchange.h"

namespace cute_ops {

// Checks every input; returns the output's column count (weight rows, halved for "swiglu").
c10::SymInt check_gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                       double eps, const std::optional<at::Tensor>& residual, const std::string& activation,
                       const char* op = "gemv");

// gemv_pull and gemv_push (tensor parallelism, gemv_exchange.h): the exchange buffer against its
// sizes, and the operands as gemv's. gemv_pull's returns its output's column count.
c10::SymInt check_gemv_pull(const at::Tensor& exchange, int64_t world, int64_t rank, int64_t slots, int64_t slot,
                            int64_t m, const at::Tensor& weight, const at::Tensor& norm_weight, double eps,
                            const std::string& activation, const std::optional<at::Tensor>& x_sum);
// The exchange's setup ops: a rank's buffer (returns its layout), its IPC handle, a peer's mapping.
GemvExchangeLayout check_gemv_exchange_buffer(const at::Tensor& like, int64_t slots, int64_t world, int64_t hidden);
void check_gemv_exchange_handle(const at::Tensor& buffer);
void check_gemv_exchange_open(const at::Tensor& buffer, const at::Tensor& handle);
void check_gemv_push(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
                     const at::Tensor& exchange, c10::IntArrayRef buffers, int64_t rank, int64_t slots, int64_t slot);
// gemv_push_lines: the operands as gemv's without a norm or an activation, the output one call of
// peer_all_reduce takes (16-bit, columns a multiple of 4, at most kPeerMaxBytes), the peer workspace
// as peer_all_reduce's. Returns the output's column count.
c10::SymInt check_gemv_push_lines(const at::Tensor& x, const at::Tensor& weight,
                                  const std::optional<at::Tensor>& residual, const at::Tensor& workspace,
                                  c10::IntArrayRef workspaces, int64_t rank);

}  // namespace cute_ops
