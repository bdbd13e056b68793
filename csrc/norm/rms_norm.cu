// Launch configuration for rms_norm / fused_add_rms_norm.
#include <algorithm>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dispatch.cuh"
#include "norm/rms_norm_kernel.cuh"

namespace cute_ops {

namespace {

// 64 bytes of loads in flight per thread (4 vectors of x, or 2 of x and 2 of the residual): fewer
// threads per row and more bytes in flight per SM than one vector a thread, within 64 registers
// (measured, docs/perf-notes.md).
constexpr int kLoadBytesPerThread = 64;
// Below one vector per resident thread of the whole GPU the op is latency-bound: one vector per
// thread then spreads the rows over more CTAs and SMs.
constexpr int kResidentThreadsPerSm = 2048;
constexpr int kMaxThreadsPerRow = 1024;
constexpr int kThreadsPerCta = 256;      // for short rows: several rows per CTA

int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

int sm_count() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device_info(device).sms;
}

template <typename T, bool kAddResidual>
void launch(const RmsNormParams& p, cudaStream_t stream) {
  const int n_vecs = static_cast<int>(p.hidden / kElemsPer16B<T>);
  const bool latency_bound = p.rows * n_vecs < static_cast<int64_t>(sm_count()) * kResidentThreadsPerSm;
  const int target_vecs = latency_bound ? 1 : kLoadBytesPerThread / 16 / (kAddResidual ? 2 : 1);
  const int threads_per_row = std::min(kMaxThreadsPerRow, next_pow2((n_vecs + target_vecs - 1) / target_vecs));
  const int rows_per_cta = std::max(1, kThreadsPerCta / threads_per_row);
  const int vecs_per_thread = (n_vecs + threads_per_row - 1) / threads_per_row;
  const dim3 block(threads_per_row, rows_per_cta);
  const int64_t ctas_for_rows = (p.rows + rows_per_cta - 1) / rows_per_cta;

  const dim3 grid(static_cast<unsigned>(ctas_for_rows));
  // x and residual vectors must fit in registers at up to 1024 threads per CTA (64 registers a
  // thread): 4 vectors a thread is the most that does, i.e. rows up to 32768 16-bit or 16384
  // float32 elements. Longer rows are read twice instead.
  if (vecs_per_thread <= 1) rms_norm_kernel<T, 1, kAddResidual><<<grid, block, 0, stream>>>(p);
  else if (vecs_per_thread <= 2) rms_norm_kernel<T, 2, kAddResidual><<<grid, block, 0, stream>>>(p);
  else if (vecs_per_thread <= 4) rms_norm_kernel<T, 4, kAddResidual><<<grid, block, 0, stream>>>(p);
  else rms_norm_long_row_kernel<T, kAddResidual><<<grid, block, 0, stream>>>(p);
  CUTE_OPS_CHECK_LAUNCH("rms_norm launch");
}

}  // namespace

void run_rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  CUTE_OPS_DTYPE_SWITCH(p.dtype, T, [&] {
    CUTE_OPS_BOOL_SWITCH(p.residual != nullptr, kAddResidual, [&] { launch<T, kAddResidual>(p, stream); });
  });
}

}  // namespace cute_ops
