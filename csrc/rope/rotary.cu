// Launch configuration for rotary_embedding.
#include <algorithm>
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/dispatch.cuh"
#include "rope/rotary_kernel.cuh"

namespace cute_ops {

namespace {

constexpr int kMaxThreads = 512;

template <typename T, typename CacheT, typename PosT, int kVec>
void launch(const RotaryParams& p, cudaStream_t stream) {
  const int units = (p.hq + p.hkv) * (p.rot_dim / 2 / kVec);
  const int threads = std::min(kMaxThreads, std::max(32, (units + 31) / 32 * 32));
  rotary_kernel<T, CacheT, PosT, kVec><<<static_cast<unsigned>(p.tokens), threads, 0, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("rotary_embedding launch");
}

template <typename T, typename CacheT>
void dispatch_pos_vec(const RotaryParams& p, cudaStream_t stream) {
  CUTE_OPS_BOOL_SWITCH(p.positions_int64, kInt64, [&] {
    using PosT = std::conditional_t<kInt64, int64_t, int32_t>;
    if (p.vectorized) launch<T, CacheT, PosT, kElemsPer16B<T>>(p, stream);
    else launch<T, CacheT, PosT, 1>(p, stream);
  });
}

}  // namespace

void run_rotary(const RotaryParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.rot_dim == 0) return;
  CUTE_OPS_DTYPE_SWITCH(p.dtype, T, [&] {
    if (p.cache_dtype == DType::kFloat32) dispatch_pos_vec<T, float>(p, stream);
    else if (p.cache_dtype == p.dtype) dispatch_pos_vec<T, T>(p, stream);
    else throw std::invalid_argument("rotary_embedding: cos_sin_cache must be float32 or q's dtype");
  });
}

}  // namespace cute_ops
