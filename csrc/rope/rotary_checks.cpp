// The input rules of rotary_embedding and its Meta impl; compiled into every build (the CPU impl
// runs the same checks, so a CPU tensor gets this op's message rather than the dispatcher's).
#include <torch/library.h>

#include "common/op_checks.h"
#include "rope/rotary_checks.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "rotary_embedding";

// q or k: [..., heads, head_dim] with q's token dims and head_dim, the last dim contiguous and the
// token dims viewable as one.
void check_heads(const at::Tensor& t, const at::Tensor& q, const char* name) {
  check_device(t, q, kOp, name, "q");
  check_same_dtype(t, q, kOp, name, "q");
  TORCH_CHECK_VALUE(t.dim() == q.dim() && t.sym_sizes().slice(0, t.dim() - 2) == q.sym_sizes().slice(0, q.dim() - 2) &&
                        t.sym_size(-1) == q.sym_size(-1),
                    kOp, ": ", name, " must be [", join_sizes(q.sym_sizes().slice(0, q.dim() - 2)), ", heads, ",
                    q.sym_size(-1), "] like q ", shape_str(q), " (q's token dims and head_dim), got ", shape_str(t));
  check_last_dim_contiguous(t, kOp, name);
  TORCH_CHECK_VALUE(leading_dims_collapse(t, 2), kOp, ": ", name, "'s token dims must be viewable as one dim, got ",
                    "strides ", strides_str(t));
}

void rotary_embedding_meta(at::Tensor& q, at::Tensor& k, const at::Tensor& positions,
                           const at::Tensor& cos_sin_cache) {
  check_rotary_embedding(q, k, positions, cos_sin_cache);
}

}  // namespace

void check_rotary_embedding(const at::Tensor& q, const at::Tensor& k, const at::Tensor& positions,
                            const at::Tensor& cos_sin_cache) {
  check_device(q, q, kOp, "q", "q");
  check_dtype_in(q, {at::kHalf, at::kBFloat16, at::kFloat}, kOp, "q");
  TORCH_CHECK_VALUE(q.dim() >= 3, kOp, ": q must be [..., num_heads, head_dim] with at least one token dim, got "
                    "shape ", shape_str(q));
  check_heads(q, q, "q");
  check_heads(k, q, "k");
  TORCH_CHECK_VALUE(!q.is_same(k), kOp, ": q and k must be different tensors");

  check_device(positions, q, kOp, "positions", "q");
  check_dtype_in(positions, {at::kLong, at::kInt}, kOp, "positions");
  TORCH_CHECK_VALUE(positions.sym_sizes() == q.sym_sizes().slice(0, q.dim() - 2), kOp,
                    ": positions must have shape ", shape_str(q.sym_sizes().slice(0, q.dim() - 2)), " (q's token "
                    "dims), got ", shape_str(positions));
  TORCH_CHECK_VALUE(positions.is_contiguous(), kOp, ": positions must be contiguous, got strides ",
                    strides_str(positions));

  check_device(cos_sin_cache, q, kOp, "cos_sin_cache", "q");
  TORCH_CHECK_TYPE(cos_sin_cache.scalar_type() == at::kFloat || cos_sin_cache.scalar_type() == q.scalar_type(), kOp,
                   ": cos_sin_cache must have dtype in (float32, ", dtype_name(q.scalar_type()).substr(6),
                   "), got ", dtype_name(cos_sin_cache.scalar_type()));
  check_dims(cos_sin_cache, 2, kOp, "cos_sin_cache");
  TORCH_CHECK_VALUE(cos_sin_cache.is_contiguous(), kOp, ": cos_sin_cache must be contiguous, got strides ",
                    strides_str(cos_sin_cache));
  TORCH_CHECK_VALUE(cos_sin_cache.sym_size(0) >= 1, kOp,
                    ": cos_sin_cache must have at least one row (position), got shape ", shape_str(cos_sin_cache));
  const c10::SymInt rot_dim = cos_sin_cache.sym_size(1);
  TORCH_CHECK_VALUE(rot_dim % 2 == 0 && rot_dim <= q.sym_size(-1), kOp, ": cos_sin_cache's rot_dim (", rot_dim,
                    ") must be even and at most head_dim (", q.sym_size(-1), ")");
}

TORCH_LIBRARY_IMPL(cute_ops, Meta, m) { m.impl("rotary_embedding", &rotary_embedding_meta); }
TORCH_LIBRARY_IMPL(cute_ops, CPU, m) { m.impl("rotary_embedding", &rotary_embedding_meta); }

}  // namespace cute_ops
