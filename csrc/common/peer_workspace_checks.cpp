// The rule for a peer workspace (peer_workspace_checks.h); compiled into every build.
#include "common/peer_workspace_checks.h"

#include "common/op_checks.h"
#include "common/peer_layout.h"

namespace cute_ops {

void check_peer_workspace(const at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank,
                          const at::Tensor& like, const char* op, const char* like_name) {
  const int64_t world = static_cast<int64_t>(workspaces.size());
  TORCH_CHECK_VALUE(world == 1 || world == 2 || world == 4 || world == 8, op,
                    ": workspaces must hold 1, 2, 4 or 8 ranks' workspaces, got ", world);
  TORCH_CHECK_VALUE(rank >= 0 && rank < world, op, ": rank must be in [0, ", world, "), got ", rank);
  check_device(workspace, like, op, "workspace", like_name);
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

}  // namespace cute_ops
