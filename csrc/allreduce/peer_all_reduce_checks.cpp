// The input rules of peer_all_reduce and its Meta and CPU impls (checks only: the op returns
// nothing); compiled into every build.
#include <torch/library.h>

#include "allreduce/peer_all_reduce_layout.h"
#include "allreduce/peer_all_reduce_checks.h"
#include "common/op_checks.h"

namespace cute_ops {

namespace {

void peer_all_reduce_meta(at::Tensor& x, at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank) {
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
  const int64_t world = static_cast<int64_t>(workspaces.size());
  TORCH_CHECK_VALUE(world == 1 || world == 2 || world == 4 || world == 8, op,
                    ": workspaces must hold 1, 2, 4 or 8 ranks' workspaces, got ", world);
  TORCH_CHECK_VALUE(rank >= 0 && rank < world, op, ": rank must be in [0, ", world, "), got ", rank);
  check_device(workspace, x, op, "workspace", "x");
  const int64_t need = PeerLayout{world}.bytes();
  TORCH_CHECK_VALUE(workspace.scalar_type() == at::kByte && workspace.dim() == 1 && workspace.is_contiguous() &&
                        workspace.sym_size(0) == need,
                    op, ": workspace must be a contiguous uint8 tensor of ", need, " bytes for ", world,
                    " ranks (peer_all_reduce_workspace_bytes), got ", dtype_name(workspace.scalar_type()), " ",
                    shape_str(workspace));
  check_aligned(workspace, kPeerLineBytes, op, "workspace");
  TORCH_CHECK_VALUE(workspace.is_meta() || workspaces[rank] == reinterpret_cast<int64_t>(workspace.data_ptr()), op,
                    ": workspaces[rank] must be this rank's workspace's address");
  for (int64_t r = 0; r < world && !workspace.is_meta(); ++r) {
    TORCH_CHECK_VALUE(workspaces[r] != 0 && workspaces[r] % kPeerLineBytes == 0, op, ": workspaces[", r,
                      "] must be a rank's workspace address (non-null, ", kPeerLineBytes, "-byte aligned), got ",
                      workspaces[r]);
  }
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("peer_all_reduce", &peer_all_reduce_meta); }

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("peer_all_reduce", &peer_all_reduce_meta); }

}  // namespace cute_ops
