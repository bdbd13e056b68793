// The input rules of l2_prefetch and its Meta and CPU impls (checks only: the op returns
// nothing); compiled into every build.
#include <torch/library.h>

#include "common/op_checks.h"
#include "prefetch/l2_prefetch_checks.h"
#include "prefetch/l2_prefetch_layout.h"

namespace cute_ops {

namespace {

void l2_prefetch_meta(const at::Tensor& t, int64_t bytes) { check_l2_prefetch(t, bytes); }

}  // namespace

void check_l2_prefetch(const at::Tensor& t, int64_t bytes) {
  const char* op = "l2_prefetch";
  TORCH_CHECK_VALUE(t.is_cuda() || t.is_meta(), op, ": t must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": t must be contiguous, got strides ", strides_str(t));
  const c10::SymInt have = t.sym_numel() * static_cast<int64_t>(t.element_size());
  TORCH_CHECK_VALUE(bytes >= 0 && bytes <= have, op, ": bytes must be in [0, ", have, "] (t's size), got ", bytes);
  TORCH_CHECK_VALUE(bytes % kL2PrefetchGranule == 0, op, ": bytes must be a multiple of ", kL2PrefetchGranule,
                    ", got ", bytes);
  check_aligned(t, kL2PrefetchGranule, op, "t");
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("l2_prefetch", &l2_prefetch_meta); }

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("l2_prefetch", &l2_prefetch_meta); }

}  // namespace cute_ops
