// The input rules of swiglu and its Meta impl (shape inference for meta and fake tensors);
// compiled into every build. The CPU impl runs the same checks, so a CPU tensor gets this op's
// message rather than the dispatcher's.
#include <torch/library.h>

#include "common/op_checks.h"
#include "gemm_pair/swiglu_checks.h"

namespace cute_ops {

namespace {

// [..., 2 * inter] -> [..., inter]
std::vector<c10::SymInt> out_sizes(const at::Tensor& gate_up) {
  std::vector<c10::SymInt> sizes(gate_up.sym_sizes().begin(), gate_up.sym_sizes().end());
  sizes.back() = sizes.back() / 2;
  return sizes;
}

at::Tensor swiglu_meta(const at::Tensor& gate_up) {
  check_swiglu(gate_up);
  return at::empty_symint(out_sizes(gate_up), gate_up.options());
}

}  // namespace

void check_swiglu(const at::Tensor& gate_up) {
  const char* op = "swiglu";
  check_device(gate_up, gate_up, op, "gate_up", "gate_up");
  check_dtype_in(gate_up, {at::kHalf, at::kBFloat16, at::kFloat}, op, "gate_up");
  TORCH_CHECK_VALUE(gate_up.dim() >= 1, op, ": gate_up must have at least 1 dims, got shape ", shape_str(gate_up));
  TORCH_CHECK_VALUE(gate_up.sym_size(-1) % 2 == 0, op, ": the last dim of gate_up (gate and up columns in ",
                    "pack_gate_up's order) must be even, got shape ", shape_str(gate_up));
  check_last_dim_contiguous(gate_up, op, "gate_up");
  TORCH_CHECK_VALUE(leading_dims_collapse(gate_up, 1), op, ": gate_up's leading dims must be viewable as one dim, ",
                    "got strides ", strides_str(gate_up));
  const int vec = elems_per_16_bytes(gate_up.scalar_type());
  TORCH_CHECK_VALUE(gate_up.dim() == 1 || gate_up.sym_stride(-2) % vec == 0, op, ": gate_up's row stride (",
                    gate_up.sym_stride(-2), ") must be a multiple of ", vec, " elements for 16-byte accesses");
  check_aligned(gate_up, 16, op, "gate_up");
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("swiglu", &swiglu_meta); }

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("swiglu", &swiglu_meta); }

}  // namespace cute_ops
