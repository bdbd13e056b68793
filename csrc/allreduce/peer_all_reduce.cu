// Launch of peer_all_reduce: one CTA per kPeerLinesPerBlock lines, a programmatic dependent of
// the previous kernel on sm_90 (common/pdl.h).
#include <stdexcept>

#include "allreduce/peer_all_reduce_kernel.cuh"
#include "common/cuda_check.h"
#include "common/device_info.h"

namespace cute_ops {

namespace {

template <typename T>
void launch(const PeerAllReduceParams& p, cudaStream_t stream) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const bool pdl = device_info(device).major >= 9;
  const dim3 grid(static_cast<unsigned>((p.lines + kPeerLinesPerBlock - 1) / kPeerLinesPerBlock));
  switch (p.world) {
    case 2: launch_dependent(pdl, allreduce::peer_all_reduce_kernel<T, 2>, grid, dim3(kPeerThreads), 0, stream, p); break;
    case 4: launch_dependent(pdl, allreduce::peer_all_reduce_kernel<T, 4>, grid, dim3(kPeerThreads), 0, stream, p); break;
    case 8: launch_dependent(pdl, allreduce::peer_all_reduce_kernel<T, 8>, grid, dim3(kPeerThreads), 0, stream, p); break;
    default: throw std::invalid_argument("peer_all_reduce: 1, 2, 4 or 8 ranks");
  }
}

}  // namespace

void run_peer_all_reduce(const PeerAllReduceParams& p, cudaStream_t stream) {
  if (p.world == 1 || p.lines == 0) return;  // one rank's sum is its tensor
  switch (p.dtype) {
    case DType::kBFloat16: launch<__nv_bfloat16>(p, stream); break;
    case DType::kFloat16: launch<__half>(p, stream); break;
    case DType::kFloat32: launch<float>(p, stream); break;
  }
}

}  // namespace cute_ops
