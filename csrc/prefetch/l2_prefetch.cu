// The kernel and launch of l2_prefetch (l2_prefetch.h says what it does): one bulk prefetch
// (CuTe's SM90_BULK_COPY_G2S::PREFETCH, the TMA unit's cp.async.bulk.prefetch.L2) of up to
// kL2PrefetchChunkBytes a thread. On GPUs before sm_90 it only keeps the stream's order.
#include <algorithm>

#include <cute/arch/copy_sm90_tma.hpp>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/pdl.h"
#include "prefetch/l2_prefetch.h"

namespace cute_ops {

namespace {

__global__ void __launch_bounds__(kL2PrefetchThreads) l2_prefetch_kernel(const L2PrefetchParams p) {
  allow_dependent_launch();
#if defined(CUTE_ARCH_TMA_SM90_ENABLED)
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kL2PrefetchChunkBytes;
  for (int64_t at = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kL2PrefetchChunkBytes;
       at < p.bytes; at += stride) {
    const int64_t left = p.bytes - at;
    const auto bytes = static_cast<int32_t>(left < kL2PrefetchChunkBytes ? left : kL2PrefetchChunkBytes);
    cute::SM90_BULK_COPY_G2S::PREFETCH::copy(static_cast<const char*>(p.ptr) + at, bytes);
  }
#endif
  wait_for_previous_grid();  // the kernel after this one waits for this one: it must cover the one before
}

}  // namespace

void run_l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo info = device_info(device);
  // Still launched for 0 bytes and before sm_90: the call is in the stream's order either way.
  const int64_t chunks = (p.bytes + kL2PrefetchChunkBytes - 1) / kL2PrefetchChunkBytes;
  const int64_t ctas = std::clamp<int64_t>((chunks + kL2PrefetchThreads - 1) / kL2PrefetchThreads, 1, info.sms);
  launch_dependent(info.major >= 9, l2_prefetch_kernel, dim3(static_cast<unsigned>(ctas)), dim3(kL2PrefetchThreads),
                   0, stream, p);
}

}  // namespace cute_ops
