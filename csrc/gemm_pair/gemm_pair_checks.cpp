// The input rules of gemm_pair and _hold_sms, and their Meta impls (shape inference for meta and
// fake tensors); compiled into every build. The CPU impls run the same checks, so a CPU tensor
// gets this op's message rather than the dispatcher's. The dtypes and block_m values with kernels
// come from the generated gemm_pair_supported.h; the tile sizes the splits must respect from
// gemm_pair.h's constants (restated nowhere else).
#include <torch/library.h>

#include <string>

#include "common/op_checks.h"
#include "gemm_pair/gemm_pair_checks.h"
#include "gemm_pair/gemm_pair_supported.h"
#include "gemm_pair/tile_order.h"

namespace cute_ops {

namespace {

namespace sets = supported::gemm_pair;

constexpr const char* kOp = "gemm_pair";

// A weight (b0, b1): a's device and dtype, 2-D, contiguous (nn.Linear layout), 16-byte aligned.
void check_weight(const at::Tensor& t, const at::Tensor& a, const char* name) {
  check_device(t, a, kOp, name, "a");
  check_same_dtype(t, a, kOp, name, "a");
  check_dims(t, 2, kOp, name);
  TORCH_CHECK_VALUE(t.is_contiguous(), kOp, ": ", name, " must be contiguous (nn.Linear weight layout), got strides ",
                    strides_str(t));
  check_aligned(t, 16, kOp, name);
}

at::Tensor gemm_pair_meta(const at::Tensor& a, const at::Tensor& b0, const at::Tensor& b1,
                          const std::string& activation, const std::string& policy, const std::string& granularity,
                          int64_t split_k0, int64_t split_k1, int64_t block_m, int64_t lag, bool separate_launches,
                          const std::string& arch) {
  check_gemm_pair(a, b0, b1, activation, policy, granularity, split_k0, split_k1, block_m, lag, arch);
  return at::empty_symint({a.sym_size(0), b1.sym_size(0)}, a.options());
}

void hold_sms_meta(const at::Tensor& control, int64_t num_ctas) { check_hold_sms(control, num_ctas); }

}  // namespace

void check_gemm_pair(const at::Tensor& a, const at::Tensor& b0, const at::Tensor& b1, const std::string& activation,
                     const std::string& policy, const std::string& granularity, int64_t split_k0, int64_t split_k1,
                     int64_t block_m, int64_t lag, const std::string& arch) {
  // a [m, k]: fp16/bf16 (the dtypes with kernels), rows of whole 16-byte vectors.
  check_device(a, a, kOp, "a", "a");
  check_dtype_in(a, sets::kDtypes, kOp, "a");
  check_dims(a, 2, kOp, "a");
  const c10::SymInt k = a.sym_size(1);
  TORCH_CHECK_VALUE(k >= 1 && k % 8 == 0, kOp, ": k (a's last dim) must be a positive multiple of 8 (16-byte vectors), "
                    "got ", k);
  TORCH_CHECK_VALUE((a.sym_size(1) <= 1 || a.sym_stride(1) == 1) && (a.sym_size(0) <= 1 || a.sym_stride(0) % 8 == 0),
                    kOp, ": a must have a contiguous last dim and a row stride that is a multiple of 8, got strides ",
                    strides_str(a));
  check_aligned(a, 16, kOp, "a");
  check_weight(b0, a, "b0");
  check_weight(b1, a, "b1");

  static constexpr const char* kActivations[] = {"swiglu", "gelu", "none"};
  static constexpr const char* kPolicies[] = {"sequential", "row_interleaved", "overlap"};
  static constexpr const char* kGranularities[] = {"tile", "row"};
  check_choice(kOp, activation, kActivations, "activation");
  check_choice(kOp, policy, kPolicies, "policy");
  check_choice(kOp, granularity, kGranularities, "granularity");
  TORCH_CHECK_VALUE(policy != "overlap" || granularity == "tile", kOp, ": the 'overlap' policy needs granularity ",
                    "'tile' (a split starts before the rest of its row block is ordered)");

  // Shapes. gated: b0 holds gate and up rows (pack_gate_up), h is half as wide.
  const bool gated = activation == "swiglu";
  const c10::SymInt m = a.sym_size(0), n0 = b0.sym_size(0), n1 = b1.sym_size(0);
  TORCH_CHECK_VALUE(b0.sym_size(1) == k, kOp, ": b0 must be [n0, k] with a's k (", k, "), got ", shape_str(b0));
  const int step = gated ? 16 : 8;
  TORCH_CHECK_VALUE(n0 >= 1 && n0 % step == 0, kOp, ": b0's rows must be a positive multiple of ", step,
                    gated ? " (swiglu: gate and up halves, each a multiple of 8)" : "", ", got ", n0);
  const c10::SymInt h_width = gated ? n0 / 2 : n0;
  TORCH_CHECK_VALUE(b1.sym_size(1) == h_width, kOp, ": b1 must be [n1, ", h_width,
                    "] (the width of act(a @ b0.T)), got ", shape_str(b1));
  TORCH_CHECK_VALUE(n1 >= 1 && n1 % 8 == 0, kOp, ": b1's rows (n1) must be a positive multiple of 8, got ", n1);
  constexpr int64_t kMaxSize = int64_t{1} << 30;  // the kernels index with 32-bit ints
  TORCH_CHECK_VALUE(m <= kMaxSize && k <= kMaxSize && n0 <= kMaxSize && n1 <= kMaxSize, kOp,
                    ": m, k, n0 and n1 must each be at most 2^30, got ", m, ", ", k, ", ", n0, ", ", n1);

  // Tiling. A GEMM1 split must read whole GEMM0 tiles' worth of h columns.
  TORCH_CHECK_VALUE(split_k0 == -1 || (split_k0 >= 0 && split_k0 % 8 == 0), kOp, ": split_k0 must be -1 (None: ",
                    "automatic), 0 (no split) or a multiple of 8, got ", split_k0);
  const int64_t h_per_tile = gated ? kGemmPairBlockN / 2 : kGemmPairBlockN;
  TORCH_CHECK_VALUE(split_k1 == -1 || (split_k1 >= 0 && split_k1 % h_per_tile == 0), kOp, ": split_k1 must be -1 ",
                    "(None: automatic), 0 (no split) or a multiple of ", h_per_tile, " (the h columns a GEMM0 tile ",
                    "makes), got ", split_k1);
  TORCH_CHECK_VALUE(block_m == 0 || sets::contains(sets::kBlockMs, static_cast<int>(block_m)), kOp,
                    ": block_m must be 0 (None: automatic) or one of (", join_values(sets::kBlockMs), "), got ",
                    block_m);
  TORCH_CHECK_VALUE(lag >= -1, kOp, ": lag must be -1 (None: automatic) or >= 0, got ", lag);

  // The kernels' kind. Whether the device runs it, and the build has it for this block_m, is the
  // dispatch's to say (gemm_pair.cu); the sm90 kernels' K tiles are the checks'.
  check_choice(kOp, arch, kKernelArchNames, "arch");
  TORCH_CHECK_VALUE(arch != "sm90" || split_k0 <= 0 || split_k0 % gemm_pair::kSm90SplitStep == 0, kOp, ": with arch 'sm90', ",
                    "split_k0 must be a multiple of ", gemm_pair::kSm90SplitStep, " (the kernels' K tile), got ", split_k0);
}

void check_hold_sms(const at::Tensor& control, int64_t num_ctas) {
  constexpr const char* op = "_hold_sms";
  check_device(control, control, op, "control", "control");
  TORCH_CHECK_VALUE(control.scalar_type() == at::kInt && control.is_contiguous() && control.sym_numel() >= 2, op,
                    ": control must be a contiguous int32 tensor of at least 2 elements ([0]: CTAs running, [1]: "
                    "release), got ", dtype_name(control.scalar_type()), " of shape ", shape_str(control));
  TORCH_CHECK_VALUE(num_ctas >= 1, op, ": num_ctas must be in [1, SMs] (one CTA an SM), got ", num_ctas);
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) {
  m.impl("gemm_pair", &gemm_pair_meta);
  m.impl("_hold_sms", &hold_sms_meta);
}

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) {
  m.impl("gemm_pair", &gemm_pair_meta);
  m.impl("_hold_sms", &hold_sms_meta);
}

}  // namespace cute_ops
