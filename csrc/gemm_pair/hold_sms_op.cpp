// Torch glue of the test-support op _hold_sms (hold_sms.h): checks, launch on the current stream,
// CUDA registration. Its schema is in torch_bindings.cpp, its fake impl in cute_ops/gemm_pair.py.
#include <c10/cuda/CUDAGuard.h>

#include "common/device_info.h"
#include "common/torch_utils.h"
#include "gemm_pair/hold_sms.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "_hold_sms";

void hold_sms_cuda(const at::Tensor& control, int64_t num_ctas) {
  check_cuda_tensor(control, kOp, "control");
  TORCH_CHECK(control.scalar_type() == at::kInt && control.is_contiguous() && control.numel() >= 2, kOp,
              ": control must be a contiguous int32 tensor of at least 2 elements ([0]: CTAs running, [1]: "
              "release), got ", control.scalar_type(), " of shape ", control.sizes());
  const c10::cuda::CUDAGuard guard(control.device());
  const int sms = device_info(control.device().index()).sms;
  TORCH_CHECK(num_ctas >= 1 && num_ctas <= sms, kOp, ": num_ctas must be in [1, ", sms,
              "] (one CTA an SM, all resident at once), got ", num_ctas);
  launch_hold_sms(control.data_ptr<int>(), static_cast<int>(num_ctas), current_stream(control));
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("_hold_sms", &hold_sms_cuda); }

}  // namespace cute_ops
