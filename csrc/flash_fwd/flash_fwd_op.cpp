// Torch glue for flash_fwd and flash_fwd_varlen: checks, output allocation, launch, registration.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "flash_fwd/flash_fwd.h"

namespace cute_ops {

namespace {

void check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t dims) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) check_attention_tensor(*t, q, op, name, dims);
  const int64_t d = q.size(-1);
  TORCH_CHECK(flash_fwd_supports_head_dim(static_cast<int>(d)), op, ": head dim must be 64, 96, 128 or 256, got ", d);
  TORCH_CHECK(k.size(-1) == d && v.size(-1) == d, op, ": q, k and v must share the head dim, got ", d, ", ",
              k.size(-1), ", ", v.size(-1));
  TORCH_CHECK(k.sizes() == v.sizes(), op, ": k and v must have the same shape, got ", k.sizes(), " and ", v.sizes());
  const int64_t hq = q.size(-2), hk = k.size(-2);
  TORCH_CHECK(hq > 0 && hk > 0 && hq % hk == 0, op, ": q's head count (", hq, ") must be a multiple of k's (", hk, ")");
}

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
                                             std::optional<double> softmax_scale, bool causal) {
  constexpr const char* kOp = "flash_fwd";
  check_qkv(kOp, q, k, v, 4);
  const int64_t b = q.size(0), sq = q.size(1), sk = k.size(1);
  TORCH_CHECK(k.size(0) == b, kOp, ": q has batch ", b, ", k has ", k.size(0));
  TORCH_CHECK(sk > 0, kOp, ": seqlen_k must be at least 1, got 0");
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
  run_flash_fwd(p, current_stream(q));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> flash_fwd_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                    int64_t max_seqlen_q, int64_t max_seqlen_k,
                                                    std::optional<double> softmax_scale, bool causal) {
  constexpr const char* kOp = "flash_fwd_varlen";
  check_qkv(kOp, q, k, v, 3);
  for (auto [t, name] : {std::pair{&cu_seqlens_q, "cu_seqlens_q"}, {&cu_seqlens_k, "cu_seqlens_k"}}) {
    check_cuda_tensor(*t, kOp, name);
    check_same_device(q, *t, kOp, name);
    TORCH_CHECK(t->scalar_type() == at::kInt && t->dim() == 1 && t->is_contiguous() && t->numel() >= 2, kOp, ": ",
                name, " must be a contiguous int32 [batch + 1] tensor, got ", t->scalar_type(), " ", t->sizes());
  }
  TORCH_CHECK(cu_seqlens_q.numel() == cu_seqlens_k.numel(), kOp, ": cu_seqlens_q and cu_seqlens_k differ in length");
  TORCH_CHECK(max_seqlen_q >= 1 && max_seqlen_k >= 1, kOp, ": max_seqlen_q and max_seqlen_k must be at least 1");
  TORCH_CHECK(q.size(0) <= INT32_MAX && k.size(0) <= INT32_MAX && max_seqlen_q <= INT32_MAX &&
                  max_seqlen_k <= INT32_MAX,
              kOp, ": row counts and max_seqlen must fit in 32 bits (cu_seqlens is int32)");
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
  run_flash_fwd(p, current_stream(q));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) {
  m.impl("flash_fwd", &flash_fwd);
  m.impl("flash_fwd_varlen", &flash_fwd_varlen);
}

}  // namespace cute_ops
