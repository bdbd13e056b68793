#pragma once
// Test support (torch.ops.cute_ops._hold_sms): occupy most SMs with CTAs that wait for a release
// word, so that a launch on another stream gets only the SMs left. tests/test_gemm_pair.py uses
// it to run gemm_pair through a few co-resident CTAs on every GPU (docs/gemm_pair.md, "Why the
// launch cannot deadlock"). Torch-free: hold_sms.cu holds the kernel, hold_sms_op.cpp the glue.
#include <cuda_runtime_api.h>

namespace cute_ops {

// Launches `num_ctas` CTAs on `stream`, each asking for the device's whole opt-in shared memory a
// block, so that no other CTA (of this kernel or any kernel using shared memory) fits beside one
// on its SM. Each CTA adds 1 to control[0] once it runs, then waits until control[1] != 0.
void launch_hold_sms(int* control, int num_ctas, cudaStream_t stream);

}  // namespace cute_ops
