// The input rules of peer_all_reduce and its Meta and CPU impls (checks only: the op returns
// nothing); compiled into every build.
#include <torch/library.h>

#include "allreduce/peer_all_reduce_checks.h"
#include "common/op_checks.h"
#include "common/peer_layout.h"
#include "common/peer_workspace_checks.h"

namespace cute_ops {

namespace {

void peer_all_reduce_meta(at::Tensor& x, at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank,
                          bool /*pushed*/) {
  check_peer_all_reduce(x, workspace, workspaces, rank);
}

}  // namespace

void check_peer_all_reduce(const at::Tensor& x, const at::Tensor& workspace, c10::IntArrayRef workspaces,
                           int64_t rank) {
  const char* op = "peer_all_reduce";
  TORCH_CHECK_VALUE(x.is_cuda() || x.is_meta(), op, ": x must be a CUDA tensor, got device ", x.device());
  check_dtype_in(x, {at::kHalf, at::kBFloat16, at::kFloat}, op, "x");
  TORCH_CHECK_VALUE(x.is_contiguous(), op, ": x must be contiguous, got strides ", strides_str(x));
  const c10::SymInt bytes = x.sym_numel() * static_cast<int64_t>(x.element_size());
  TORCH_CHECK_VALUE(bytes % kPeerPayloadBytes == 0, op, ": x must hold a multiple of ", kPeerPayloadBytes,
                    " bytes, got ", bytes, " (shape ", shape_str(x), ")");
  TORCH_CHECK_VALUE(bytes <= kPeerMaxBytes, op, ": x holds ", bytes, " bytes, more than the ", kPeerMaxBytes,
                    " one call takes (a decode step's rows; use NCCL's all-reduce for more)");
  check_aligned(x, kPeerPayloadBytes, op, "x");
  check_peer_workspace(workspace, workspaces, rank, x, op, "x");  // common/peer_workspace_checks.cpp
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("peer_all_reduce", &peer_all_reduce_meta); }

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("peer_all_reduce", &peer_all_reduce_meta); }

}  // namespace cute_ops
