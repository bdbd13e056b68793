#pragma once
// The rule for a peer workspace (common/peer_layout.h) and the addresses of every rank's, shared by
// the ops that store or sum peer lines (peer_all_reduce, gemv_push_lines); common/op_checks.h says
// how rules are kept.
#include <ATen/ATen.h>

namespace cute_ops {

// workspace: this rank's, on `like`'s device; workspaces: every rank's address in this process (1,
// 2, 4 or 8 of them), this rank's at [rank].
void check_peer_workspace(const at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank,
                          const at::Tensor& like, const char* op, const char* like_name);

}  // namespace cute_ops
