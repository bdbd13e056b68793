// Torch glue for flash_fwd and flash_fwd_varlen: output allocation, launch, registration. The
// input rules are in flash_fwd_checks.cpp, shared with the Meta impls.
#include <c10/cuda/CUDAGuard.h>

#include "common/attention_checks.h"
#include "common/torch_utils.h"
#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/flash_fwd_checks.h"

namespace cute_ops {

namespace {

FlashFwdParams make_params(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const at::Tensor& out, const at::Tensor& lse, std::optional<double> softmax_scale,
                           bool causal) {
  FlashFwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.d = static_cast<int>(q.size(-1));
  p.h = static_cast<int>(q.size(-2));
  p.h_k = static_cast<int>(k.size(-2));
  p.q_row_stride = q.stride(-3), p.q_head_stride = q.stride(-2);
  p.k_row_stride = k.stride(-3), p.k_head_stride = k.stride(-2);
  p.v_row_stride = v.stride(-3), p.v_head_stride = v.stride(-2);
  p.o_row_stride = out.stride(-3), p.o_head_stride = out.stride(-2);
  const AttentionScale scale = attention_scale(op, softmax_scale, p.d);
  p.scale_softmax = scale.scale, p.scale_softmax_log2 = scale.scale_log2, p.negate_q = scale.negate_q;
  p.is_causal = causal;
  p.is_bf16 = q.scalar_type() == at::kBFloat16;
  return p;
}

std::tuple<at::Tensor, at::Tensor> flash_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             std::optional<double> softmax_scale, bool causal,
                                             const std::string& arch) {
  constexpr const char* kOp = "flash_fwd";
  check_flash_fwd(q, k, v, softmax_scale, arch);  // flash_fwd_checks.cpp
  const int64_t b = q.size(0), sq = q.size(1), sk = k.size(1);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({b, q.size(2), sq}, q.options().dtype(at::kFloat));
  if (sq == 0 || b == 0) return {out, lse};
  FlashFwdParams p = make_params(kOp, q, k, v, out, lse, softmax_scale, causal);
  p.b = static_cast<int>(b);
  p.seqlen_q = static_cast<int>(sq);
  p.seqlen_k = static_cast<int>(sk);
  p.q_batch_stride = q.stride(0), p.k_batch_stride = k.stride(0), p.v_batch_stride = v.stride(0);
  p.o_batch_stride = out.stride(0);
  p.lse_batch_stride = lse.stride(0), p.lse_head_stride = lse.stride(1);
  run_flash_fwd(p, parse_kernel_arch(arch, kOp), current_stream(q));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> flash_fwd_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                    int64_t max_seqlen_q, int64_t max_seqlen_k,
                                                    std::optional<double> softmax_scale, bool causal,
                                                    const std::string& arch) {
  constexpr const char* kOp = "flash_fwd_varlen";
  check_flash_fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, arch);
  const c10::cuda::CUDAGuard guard(q.device());
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
  if (q.size(0) == 0) return {out, lse};
  FlashFwdParams p = make_params(kOp, q, k, v, out, lse, softmax_scale, causal);
  p.b = static_cast<int>(cu_seqlens_q.numel() - 1);
  p.seqlen_q = static_cast<int>(max_seqlen_q);
  p.seqlen_k = static_cast<int>(max_seqlen_k);
  p.cu_seqlens_q = cu_seqlens_q.data_ptr<int>();
  p.cu_seqlens_k = cu_seqlens_k.data_ptr<int>();
  p.total_q = static_cast<int>(q.size(0));
  p.total_k = static_cast<int>(k.size(0));
  p.errors = device_error_sink(q.device().index());
  p.lse_head_stride = lse.stride(0);
  run_flash_fwd(p, parse_kernel_arch(arch, kOp), current_stream(q));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) {
  m.impl("flash_fwd", &flash_fwd);
  m.impl("flash_fwd_varlen", &flash_fwd_varlen);
}

}  // namespace cute_ops
