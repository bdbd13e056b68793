// Torch glue for rotary_embedding: launch and registration. The input rules are in
// rotary_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>

#include "common/op_checks.h"
#include "common/torch_utils.h"
#include "rope/rotary.h"
#include "rope/rotary_checks.h"

namespace cute_ops {

namespace {

constexpr const char* kOp = "rotary_embedding";

// Where q or k rows live: their token and head strides, and whether 16-byte accesses line up.
struct HeadsView {
  int64_t token_stride;
  int64_t head_stride;
  bool aligned;
};

HeadsView heads_view(const at::Tensor& t, int vec) {
  const int64_t token_stride = collapsed_row_stride(t, 2);
  const int64_t head_stride = t.stride(-2);
  const bool aligned = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && token_stride % vec == 0 &&
                       head_stride % vec == 0;
  return {token_stride, head_stride, aligned};
}

void rotary_embedding(at::Tensor& q, at::Tensor& k, const at::Tensor& positions, const at::Tensor& cos_sin_cache) {
  check_rotary_embedding(q, k, positions, cos_sin_cache);  // rotary_checks.cpp
  const DType dtype = to_dtype(q.scalar_type(), kOp, "q");
  const DType cache_dtype = to_dtype(cos_sin_cache.scalar_type(), kOp, "cos_sin_cache");
  const int vec = elems_per_16_bytes(q.scalar_type());
  const HeadsView qv = heads_view(q, vec);
  const HeadsView kv = heads_view(k, vec);
  const int64_t head_dim = q.size(-1);
  const int64_t rot_dim = cos_sin_cache.size(1);

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
