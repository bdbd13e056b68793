// Torch glue for peer_all_reduce: launch and registration. The input rules are in
// peer_all_reduce_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "allreduce/peer_all_reduce.h"
#include "allreduce/peer_all_reduce_checks.h"
#include "common/torch_utils.h"

namespace cute_ops {

namespace {

void peer_all_reduce(at::Tensor& x, at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank, bool pushed) {
  check_peer_all_reduce(x, workspace, workspaces, rank);  // peer_all_reduce_checks.cpp
  const c10::cuda::CUDAGuard guard(x.device());
  PeerAllReduceParams p{};
  p.x = x.data_ptr();
  p.lines = x.numel() * static_cast<int64_t>(x.element_size()) / kPeerPayloadBytes;
  p.world = static_cast<int>(workspaces.size());
  p.rank = static_cast<int>(rank);
  for (int r = 0; r < p.world; ++r) p.workspaces[r] = reinterpret_cast<void*>(workspaces[r]);
  p.dtype = to_dtype(x.scalar_type(), "peer_all_reduce", "x");
  p.pushed = pushed;
  run_peer_all_reduce(p, current_stream(x));
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("peer_all_reduce", &peer_all_reduce); }

}  // namespace cute_ops
