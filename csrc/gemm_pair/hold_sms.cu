// The SM holder of hold_sms.h.
#include "common/cuda_check.h"
#include "common/kernel_attributes.h"
#include "gemm_pair/hold_sms.h"

namespace cute_ops {

namespace {

// The release word is written by a copy engine (a host-to-device copy), not by a thread of this
// kernel's grid: system scope, so that nothing is assumed about where the write comes from.
__device__ __forceinline__ int load_acquire_sys(const int* p) {
  int v;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One thread a CTA; its dynamic shared memory is never touched, only reserved, which is what
// keeps other CTAs off the SM.
__global__ void hold_sm_kernel(int* control) {
  atomicAdd(control, 1);  // this CTA is resident
  while (load_acquire_sys(control + 1) == 0) __nanosleep(1000);
}

}  // namespace

void launch_hold_sms(int* control, int num_ctas, cudaStream_t stream) {
  int device = -1, smem = 0;
  check_cuda(cudaGetDevice(&device), "hold_sms device");
  check_cuda(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "hold_sms shared memory size");
  static DynamicSmemOptIn smem_opt_in;
  smem_opt_in.apply(hold_sm_kernel, smem, "hold_sms shared memory");
  hold_sm_kernel<<<num_ctas, 1, smem, stream>>>(control);
  CUTE_OPS_CHECK_LAUNCH("hold_sms launch");
}

}  // namespace cute_ops
