// Torch glue for l2_prefetch: launch and registration. The input rules are in
// l2_prefetch_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "prefetch/l2_prefetch.h"
#include "prefetch/l2_prefetch_checks.h"

namespace cute_ops {

namespace {

void l2_prefetch(const at::Tensor& t, int64_t bytes) {
  check_l2_prefetch(t, bytes);  // l2_prefetch_checks.cpp
  const c10::cuda::CUDAGuard guard(t.device());
  L2PrefetchParams p{};
  p.ptr = t.data_ptr();
  p.bytes = bytes;
  run_l2_prefetch(p, current_stream(t));
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("l2_prefetch", &l2_prefetch); }

}  // namespace cute_ops
