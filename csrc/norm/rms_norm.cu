// Launch configuration for rms_norm / fused_add_rms_norm.
#include <algorithm>

#include "common/cuda_check.h"
#include "common/dispatch.cuh"
#include "norm/rms_norm_kernel.cuh"

namespace cute_ops {

namespace {

constexpr int kTargetVecsPerThread = 2;  // more threads per row beats more registers per thread
constexpr int kMaxThreadsPerRow = 1024;
constexpr int kThreadsPerCta = 256;      // for short rows: several rows per CTA

int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

template <typename T, bool kAddResidual>
void launch(const RmsNormParams& p, cudaStream_t stream) {
  const int n_vecs = static_cast<int>(p.hidden / kElemsPer16B<T>);
  const int threads_per_row =
      std::min(kMaxThreadsPerRow, next_pow2((n_vecs + kTargetVecsPerThread - 1) / kTargetVecsPerThread));
  const int rows_per_cta = std::max(1, kThreadsPerCta / threads_per_row);
  const int vecs_per_thread = (n_vecs + threads_per_row - 1) / threads_per_row;
  const dim3 block(threads_per_row, rows_per_cta);
  const dim3 grid(static_cast<unsigned>((p.rows + rows_per_cta - 1) / rows_per_cta));
  auto go = [&](auto kernel) { kernel<<<grid, block, 0, stream>>>(p); };
  if (vecs_per_thread <= 1) go(rms_norm_kernel<T, 1, kAddResidual>);
  else if (vecs_per_thread <= 2) go(rms_norm_kernel<T, 2, kAddResidual>);
  else if (vecs_per_thread <= 4) go(rms_norm_kernel<T, 4, kAddResidual>);
  else if (vecs_per_thread <= 8) go(rms_norm_kernel<T, 8, kAddResidual>);
  else go(rms_norm_kernel<T, 0, kAddResidual>);
  CUTE_OPS_CHECK_LAUNCH("rms_norm launch");
}

}  // namespace

int rms_norm_vector_width(DType dtype) {
  return CUTE_OPS_DTYPE_SWITCH(dtype, T, [&] { return kElemsPer16B<T>; });
}

void run_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  CUTE_OPS_DTYPE_SWITCH(p.dtype, T, [&] {
    CUTE_OPS_BOOL_SWITCH(p.residual != nullptr, kAddResidual, [&] { launch<T, kAddResidual>(p, stream); });
  });
}

}  // namespace cute_ops
