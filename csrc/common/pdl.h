#pragma once
// Programmatic dependent launch (sm_90): a kernel launched with launch_dependent() may start
// while the previous kernel of its stream is still finishing, so its launch latency and prologue
// hide behind that kernel's tail. It must call wait_for_previous_grid() before touching anything
// the previous kernel writes; the previous kernel may call allow_dependent_launch() to let the
// dependent's CTAs be scheduled before it has fully drained. On older GPUs both are no-ops and
// the launch is an ordinary stream-ordered one. Graph capture records the dependency as a
// programmatic edge, so replays keep the overlap.
#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace cute_ops {

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// An L2 prefetch of the 128-byte line holding `p`. Safe before wait_for_previous_grid(): it only
// moves a line from DRAM into L2, the point of coherence, so the loads after the wait still see
// what the previous kernel wrote; it starts a DRAM trip early without waiting for it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the
// stream's previous kernel when `enable` (the device is sm_90 or newer).
template <typename... KernelArgs, typename... Args>
void launch_dependent(bool enable, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = enable ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), "kernel launch");
}

}  // namespace cute_ops
