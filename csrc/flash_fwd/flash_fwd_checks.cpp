// The input rules of flash_fwd and flash_fwd_varlen, and their Meta impls (shape inference for
// meta and fake tensors); compiled into every build. The CPU impls run the same checks, so a CPU
// tensor gets this op's message rather than the dispatcher's. The supported head dims come from
// the generated flash_fwd_supported.h.
#include <torch/library.h>

#include <climits>
#include <tuple>

#include "common/attention_checks.h"
#include "common/kernel_arch.h"
#include "flash_fwd/flash_fwd_checks.h"
#include "flash_fwd/flash_fwd_supported.h"

namespace cute_ops {

namespace {

namespace sets = supported::flash_fwd;

// q, k, v of either layout: fp16/bf16 on one device, the head dim one with kernels, k and v alike,
// q's heads a multiple of k's (each group of heads_q / heads_kv query heads shares a kv head).
void check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
               std::initializer_list<const char*> q_dims, std::initializer_list<const char*> kv_dims) {
  check_attention_operand(q, q, op, "q", q_dims);
  check_attention_operand(k, q, op, "k", kv_dims);
  check_attention_operand(v, q, op, "v", kv_dims);
  // The head dim picks the kernel: a traced graph specialises on it.
  const int64_t d = q.sym_size(-1).guard_int(__FILE__, __LINE__);
  TORCH_CHECK_VALUE(sets::contains(sets::kHeadDims, static_cast<int>(d)), op,
                    ": head_dim (last dim of q) must be one of (", join_values(sets::kHeadDims), "), got ", d);
  TORCH_CHECK_VALUE(k.sym_size(-1) == d, op, ": k must have q's head_dim (", d, ") as its last dim, got shape ",
                    shape_str(k));
  TORCH_CHECK_VALUE(v.sym_sizes() == k.sym_sizes(), op, ": v must have k's shape ", shape_str(k), ", got ",
                    shape_str(v));
  const c10::SymInt hq = q.sym_size(-2), hk = k.sym_size(-2);
  TORCH_CHECK_VALUE(hk >= 1 && hq >= hk && hq % hk == 0, op, ": q's head count (", hq,
                    ") must be a positive multiple of k and v's (", hk, "): each group of heads_q / heads_kv query "
                    "heads shares one kv head");
}

std::tuple<at::Tensor, at::Tensor> flash_fwd_meta(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  std::optional<double> softmax_scale, bool causal,
                                                  const std::string& arch) {
  check_flash_fwd(q, k, v, softmax_scale, arch);
  return {at::empty_symint(q.sym_sizes(), q.options()),
          at::empty_symint({q.sym_size(0), q.sym_size(2), q.sym_size(1)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> flash_fwd_varlen_meta(const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& v, const at::Tensor& cu_seqlens_q,
                                                         const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                                                         int64_t max_seqlen_k, std::optional<double> softmax_scale,
                                                         bool causal, const std::string& arch) {
  check_flash_fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, arch);
  return {at::empty_symint(q.sym_sizes(), q.options()),
          at::empty_symint({q.sym_size(1), q.sym_size(0)}, q.options().dtype(at::kFloat))};
}

}  // namespace

void check_flash_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     std::optional<double> softmax_scale, const std::string& arch) {
  constexpr const char* kOp = "flash_fwd";
  check_choice(kOp, arch, kKernelArchNames, "arch");  // which kinds apply: flash_fwd.cu
  check_qkv(kOp, q, k, v, {"batch", "seqlen_q", "heads_q", "head_dim"}, {"batch", "seqlen_k", "heads_kv", "head_dim"});
  TORCH_CHECK_VALUE(k.sym_size(0) == q.sym_size(0), kOp, ": k and v must have q's batch size (", q.sym_size(0),
                    "), got shape ", shape_str(k));
  TORCH_CHECK_VALUE(k.sym_size(1) >= 1, kOp, ": k and v must hold at least one key (seqlen_k >= 1): softmax over no ",
                    "keys is undefined, got shape ", shape_str(k));
  check_softmax_scale(softmax_scale, kOp);
}

void check_flash_fwd_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                            int64_t max_seqlen_k, std::optional<double> softmax_scale,
                            const std::string& arch) {
  constexpr const char* kOp = "flash_fwd_varlen";
  check_choice(kOp, arch, kKernelArchNames, "arch");  // which kinds apply: flash_fwd.cu
  check_qkv(kOp, q, k, v, {"total_q", "heads_q", "head_dim"}, {"total_k", "heads_kv", "head_dim"});
  for (auto [t, name] : {std::pair{&cu_seqlens_q, "cu_seqlens_q"}, {&cu_seqlens_k, "cu_seqlens_k"}}) {
    check_int32_operand(*t, q, kOp, name, 1);
    TORCH_CHECK_VALUE(t->is_contiguous(), kOp, ": ", name, " must be contiguous, got strides ", strides_str(*t));
  }
  TORCH_CHECK_VALUE(cu_seqlens_q.sym_size(0) >= 2, kOp, ": cu_seqlens_q must hold batch + 1 >= 2 offsets, got shape ",
                    shape_str(cu_seqlens_q));
  TORCH_CHECK_VALUE(cu_seqlens_k.sym_size(0) == cu_seqlens_q.sym_size(0), kOp, ": cu_seqlens_k must have ",
                    "cu_seqlens_q's length (", cu_seqlens_q.sym_size(0), ", one more than the batch size), got shape ",
                    shape_str(cu_seqlens_k));
  for (auto [bound, name] : {std::pair{max_seqlen_q, "max_seqlen_q"}, {max_seqlen_k, "max_seqlen_k"}}) {
    TORCH_CHECK_VALUE(bound >= 1 && bound <= INT32_MAX, kOp, ": ", name, " must be an int >= 1 (and below 2^31), at ",
                      "least the longest sequence's length, got ", bound);
  }
  TORCH_CHECK_VALUE(q.sym_size(0) <= INT32_MAX && k.sym_size(0) <= INT32_MAX, kOp, ": row counts must fit in ",
                    "32 bits (cu_seqlens is int32), got shapes ", shape_str(q), " and ", shape_str(k));
  check_softmax_scale(softmax_scale, kOp);
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) {
  m.impl("flash_fwd", &flash_fwd_meta);
  m.impl("flash_fwd_varlen", &flash_fwd_varlen_meta);
}

TORCH_LIBRARY_IMPL(cute_ops, CPU, m) {
  m.impl("flash_fwd", &flash_fwd_meta);
  m.impl("flash_fwd_varlen", &flash_fwd_varlen_meta);
}

}  // namespace cute_ops
