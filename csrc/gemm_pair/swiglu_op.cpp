// Torch glue for swiglu: output allocation, launch, registration. The input rules are in
// swiglu_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "gemm_pair/swiglu.h"
#include "gemm_pair/swiglu_checks.h"

namespace cute_ops {

namespace {

at::Tensor swiglu(const at::Tensor& gate_up) {
  check_swiglu(gate_up);  // swiglu_checks.cpp
  const c10::cuda::CUDAGuard guard(gate_up.device());
  std::vector<int64_t> sizes(gate_up.sizes().begin(), gate_up.sizes().end());
  sizes.back() /= 2;
  at::Tensor out = at::empty(sizes, gate_up.options());
  SwigluParams p{};
  p.out = out.data_ptr();
  p.gate_up = gate_up.data_ptr();
  p.inter = sizes.back();
  p.rows = p.inter == 0 ? 0 : out.numel() / p.inter;
  p.in_row_stride = gate_up.dim() == 1 ? 0 : collapsed_row_stride(gate_up, 1);
  p.dtype = to_dtype(gate_up.scalar_type(), "swiglu", "gate_up");
  run_swiglu(p, current_stream(gate_up));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("swiglu", &swiglu); }

}  // namespace cute_ops
