// Torch glue of the test-support op _hold_sms (hold_sms.h): the SM-count bound, launch on the
// current stream, CUDA registration. Its schema is in torch_bindings.cpp, its other input rules and
// Meta impl in gemm_pair_checks.cpp.
#include <c10/cuda/CUDAGuard.h>

#include "common/device_info.h"
#include "common/torch_utils.h"
#include "gemm_pair/gemm_pair_checks.h"
#include "gemm_pair/hold_sms.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "_hold_sms";

void hold_sms_cuda(const at::Tensor& control, int64_t num_ctas) {
  check_hold_sms(control, num_ctas);  // gemm_pair_checks.cpp
  const c10::cuda::CUDAGuard guard(control.device());
  const int sms = device_info(control.device().index()).sms;
  TORCH_CHECK_VALUE(num_ctas <= sms, kOp, ": num_ctas must be in [1, ", sms,
                    "] (one CTA an SM, all resident at once), got ", num_ctas);
  launch_hold_sms(control.data_ptr<int>(), static_cast<int>(num_ctas), current_stream(control));
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("_hold_sms", &hold_sms_cuda); }

}  // namespace cute_ops
