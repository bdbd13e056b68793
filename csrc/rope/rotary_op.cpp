// Torch glue for rotary_embedding: checks, launch, registration.
#include <c10/cuda/CUDAGuard.h>

#include "common/torch_utils.h"
#include "rope/rotary.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "rotary_embedding";

struct HeadsView {
  int64_t token_stride;
  int64_t head_stride;
  bool aligned;  // 16-byte accesses possible
};

HeadsView check_heads(const at::Tensor& t, const at::Tensor& q, const char* arg, int vec) {
  check_cuda_tensor(t, kOp, arg);
  check_same_device(q, t, kOp, arg);
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), kOp, ": ", arg, " has dtype ", t.scalar_type(),
              ", expected ", q.scalar_type(), " like q");
  TORCH_CHECK(t.dim() == q.dim(), kOp, ": ", arg, " must have ", q.dim(), " dims like q, got shape ", t.sizes());
  TORCH_CHECK(t.sizes().slice(0, t.dim() - 2) == q.sizes().slice(0, q.dim() - 2), kOp, ": ", arg,
              " must share q's leading (token) dims, got ", t.sizes(), " and q ", q.sizes());
  TORCH_CHECK(t.size(-1) == q.size(-1), kOp, ": ", arg, " has head_dim ", t.size(-1), ", q has ", q.size(-1));
  TORCH_CHECK(t.stride(-1) == 1, kOp, ": ", arg, "'s last dim must be contiguous, got strides ", t.strides());
  const int64_t token_stride = collapsed_row_stride(t, 2);
  TORCH_CHECK(token_stride >= 0, kOp, ": ", arg, "'s token dims must be viewable as one dim, got strides ",
              t.strides());
  const int64_t head_stride = t.stride(-2);
  const bool aligned = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && token_stride % vec == 0 &&
                       head_stride % vec == 0;
  return {token_stride, head_stride, aligned};
}

void rotary_embedding(at::Tensor& q, at::Tensor& k, const at::Tensor& positions, const at::Tensor& cos_sin_cache) {
  check_cuda_tensor(q, kOp, "q");
  TORCH_CHECK(q.dim() >= 3, kOp, ": q must be [..., num_heads, head_dim] with at least one token dim, got ",
              q.sizes());
  const DType dtype = to_dtype(q.scalar_type(), kOp, "q");
  const int vec = rotary_vector_width(dtype);
  const HeadsView qv = check_heads(q, q, "q", vec);
  const HeadsView kv = check_heads(k, q, "k", vec);
  TORCH_CHECK(!q.is_same(k), kOp, ": q and k must be different tensors");

  check_cuda_tensor(positions, kOp, "positions");
  check_same_device(q, positions, kOp, "positions");
  TORCH_CHECK(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt, kOp,
              ": positions must be int64 or int32, got ", positions.scalar_type());
  TORCH_CHECK(positions.sizes() == q.sizes().slice(0, q.dim() - 2), kOp, ": positions must have q's token shape ",
              q.sizes().slice(0, q.dim() - 2), ", got ", positions.sizes());
  TORCH_CHECK(positions.is_contiguous(), kOp, ": positions must be contiguous");

  check_cuda_tensor(cos_sin_cache, kOp, "cos_sin_cache");
  check_same_device(q, cos_sin_cache, kOp, "cos_sin_cache");
  TORCH_CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.is_contiguous(), kOp,
              ": cos_sin_cache must be a contiguous [max_position, rot_dim] tensor, got shape ",
              cos_sin_cache.sizes());
  const DType cache_dtype = to_dtype(cos_sin_cache.scalar_type(), kOp, "cos_sin_cache");
  TORCH_CHECK(cache_dtype == DType::kFloat32 || cache_dtype == dtype, kOp,
              ": cos_sin_cache must be float32 or q's dtype (", q.scalar_type(), "), got ",
              cos_sin_cache.scalar_type());
  TORCH_CHECK(cos_sin_cache.size(0) > 0, kOp, ": cos_sin_cache must have at least one row (position), got shape ",
              cos_sin_cache.sizes());
  const int64_t head_dim = q.size(-1);
  const int64_t rot_dim = cos_sin_cache.size(1);
  TORCH_CHECK(rot_dim % 2 == 0 && rot_dim <= head_dim, kOp, ": cos_sin_cache's rot_dim (", rot_dim,
              ") must be even and at most head_dim (", head_dim, ")");

  RotaryParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.positions = positions.data_ptr();
  p.cos_sin = cos_sin_cache.data_ptr();
  p.max_position = cos_sin_cache.size(0);
  p.errors = device_error_sink(q.device().index());
  p.tokens = positions.numel();
  p.hq = static_cast<int>(q.size(-2));
  p.hkv = static_cast<int>(k.size(-2));
  p.head_dim = static_cast<int>(head_dim);
  p.rot_dim = static_cast<int>(rot_dim);
  p.q_token_stride = qv.token_stride;
  p.q_head_stride = qv.head_stride;
  p.k_token_stride = kv.token_stride;
  p.k_head_stride = kv.head_stride;
  p.dtype = dtype;
  p.cache_dtype = cache_dtype;
  p.positions_int64 = positions.scalar_type() == at::kLong;
  p.vectorized = qv.aligned && kv.aligned && (rot_dim / 2) % vec == 0 &&
                 reinterpret_cast<uintptr_t>(cos_sin_cache.data_ptr()) % 16 == 0;
  const c10::cuda::CUDAGuard guard(q.device());
  run_rotary(p, current_stream(q));
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("rotary_embedding", &rotary_embedding); }

}  // namespace cute_ops
