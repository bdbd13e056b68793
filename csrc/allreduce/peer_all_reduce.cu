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
  auto go = [&](auto kernel) { launch_dependent(pdl, kernel, grid, dim3(kPeerThreads), 0, stream, p); };
  switch (p.world) {
    case 1: go(allreduce::peer_all_reduce_kernel<T, 1, true>); break;  // (pushed only: a plain call returns early)
    case 2: p.pushed ? go(allreduce::peer_all_reduce_kernel<T, 2, true>) : go(allreduce::peer_all_reduce_kernel<T, 2, false>); break;
    case 4: p.pushed ? go(allreduce::peer_all_reduce_kernel<T, 4, true>) : go(allreduce::peer_all_reduce_kernel<T, 4, false>); break;
    case 8: p.pushed ? go(allreduce::peer_all_reduce_kernel<T, 8, true>) : go(allreduce::peer_all_reduce_kernel<T, 8, false>); break;
    default: throw std::invalid_argument("peer_all_reduce: 1, 2, 4 or 8 ranks");
  }
}

}  // namespace

void run_peer_all_reduce(const PeerAllReduceParams& p, cudaStream_t stream) {
  // One rank's sum is its tensor; but a pushed call's count must advance as its gemv's epochs did.
  if ((p.world == 1 && !p.pushed) || p.lines == 0) return;
  switch (p.dtype) {
    case DType::kBFloat16: launch<__nv_bfloat16>(p, stream); break;
    case DType::kFloat16: launch<__half>(p, stream); break;
    case DType::kFloat32: launch<float>(p, stream); break;
  }
}

}  // namespace cute_ops
