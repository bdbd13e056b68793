#pragma once
// Online softmax over the rows of an attention score accumulator (S = Q K^T), kept in registers:
// flash_fwd and flash_decode run the same one.
//
// Each thread holds kRows rows' worth of a tile; a row is shared by the 4 threads of an MMA quad,
// so row reductions finish with two shuffles. The running max is kept unscaled; exponentials are
// exp2(s * scale_log2 - max * scale_log2), one FFMA and one EX2 per score. A row that has seen
// only masked (-inf) scores keeps max = -inf: its exponentials use 0 as the subtracted max (so they
// are exp2(-inf) = 0, not NaN), and it ends with sum 0. finalize() hands (max, sum) to
// SoftmaxMergeState (softmax_merge.h), whose rules make that row empty (output 0, lse -inf) and a
// row whose sum a NaN score reached NaN, so a NaN in the inputs shows in the output in every split
// configuration instead of reading as "no keys".
//
// Lazy rescaling: the max that the exponentials subtract (row_max) is only moved when some row of
// the warp has seen a score more than kRescaleThreshold (log2 units) above it; until then the
// probabilities may exceed 1, by at most 2^kRescaleThreshold, which fp32 sums and 16-bit P hold
// without loss (the relative rounding of bf16/fp16 does not depend on magnitude). O and l are
// scaled by the same stale max, so the result is exact; only the rescale of O (kRows x head dim
// multiplies a thread) is skipped, which after the first few key tiles is almost every tile. The
// decision is warp-uniform (a vote), so no lane diverges. The idea is FlashAttention-4's.
// Requires scale_log2 >= 0: a negative softmax scale is applied by negating Q instead.
#include <cute/tensor.hpp>

#include <cmath>

#include "common/cute/softmax_merge.h"

namespace cute_ops {

using namespace cute;

namespace sm80 {

// Reductions over the 4 threads of an MMA quad, which share one accumulator row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

}  // namespace sm80

template <int kRows>
struct OnlineSoftmax {
  static constexpr int kRowsPerThread = kRows;
  static constexpr float kRescaleThreshold = 8.f;  // log2 units: P stays below 256

  float row_max[kRows];
  float row_sum[kRows];  // this thread's partial sums; quad-reduced in finalize()

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.f;
    }
  }

  // scores: the S tile in rowcol view, replaced by unnormalised probabilities P. acc_o: the O
  // accumulator in rowcol view, rescaled when the reference max moves. On the first tile the
  // rescale factor is exp2(-inf) = 0 against a zero sum and a zero accumulator, so no special case.
  template <typename TensorS, typename TensorO>
  __device__ __forceinline__ void update(TensorS& scores, TensorO& acc_o, float scale_log2) {
    static_assert(decltype(size<0>(scores))::value == kRows);
    float tile_max[kRows];
    bool stale = false;
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      float m = row_max[mi];
#pragma unroll
      for (int ni = 0; ni < size<1>(scores); ++ni) m = fmaxf(m, scores(mi, ni));
      tile_max[mi] = sm80::quad_max(m);
      // -inf > -inf + t is false: a row still fully masked does not force a rescale.
      stale |= tile_max[mi] * scale_log2 > row_max[mi] * scale_log2 + kRescaleThreshold;
    }
    if (__any_sync(0xffffffffu, stale)) {
#pragma unroll
      for (int mi = 0; mi < kRows; ++mi) {
        const float m_scaled = tile_max[mi] == -INFINITY ? 0.f : tile_max[mi] * scale_log2;
        const float rescale = exp2f(row_max[mi] * scale_log2 - m_scaled);  // 0 while the old max is -inf
        row_sum[mi] *= rescale;
#pragma unroll
        for (int ni = 0; ni < size<1>(acc_o); ++ni) acc_o(mi, ni) *= rescale;
        row_max[mi] = tile_max[mi];
      }
    }
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      const float m_scaled = row_max[mi] == -INFINITY ? 0.f : row_max[mi] * scale_log2;
      float s = 0.f;
#pragma unroll
      for (int ni = 0; ni < size<1>(scores); ++ni) {
        scores(mi, ni) = exp2f(scores(mi, ni) * scale_log2 - m_scaled);
        s += scores(mi, ni);
      }
      row_sum[mi] += s;
    }
  }

  // update() in two halves, for a mainloop that issues O += P V of the previous block before it
  // turns this block's scores into P (the SM90 kernel's): update_scores() replaces the scores by P
  // and moves the sums, leaving O alone; the factor each row of O needs before the next P V is
  // added goes to rescale[], and the (warp-uniform) result says whether any row's factor may
  // differ from 1. rescale_o() applies them once O is no longer being written by an MMA. Same
  // rules, same numbers as update().
  template <typename TensorS>
  __device__ __forceinline__ bool update_scores(TensorS& scores, float scale_log2, float (&rescale)[kRows]) {
    static_assert(decltype(size<0>(scores))::value == kRows);
    float tile_max[kRows];
    bool stale = false;
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      float m = row_max[mi];
#pragma unroll
      for (int ni = 0; ni < size<1>(scores); ++ni) m = fmaxf(m, scores(mi, ni));
      tile_max[mi] = sm80::quad_max(m);
      stale |= tile_max[mi] * scale_log2 > row_max[mi] * scale_log2 + kRescaleThreshold;
    }
    const bool moved = __any_sync(0xffffffffu, stale);
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      rescale[mi] = 1.f;
      if (moved) {
        const float m_scaled = tile_max[mi] == -INFINITY ? 0.f : tile_max[mi] * scale_log2;
        rescale[mi] = exp2f(row_max[mi] * scale_log2 - m_scaled);  // 0 while the old max is -inf
        row_sum[mi] *= rescale[mi];
        row_max[mi] = tile_max[mi];
      }
      const float m_scaled = row_max[mi] == -INFINITY ? 0.f : row_max[mi] * scale_log2;
      float sum = 0.f;
#pragma unroll
      for (int ni = 0; ni < size<1>(scores); ++ni) {
        scores(mi, ni) = exp2f(scores(mi, ni) * scale_log2 - m_scaled);
        sum += scores(mi, ni);
      }
      row_sum[mi] += sum;
    }
    return moved;
  }

  template <typename TensorO>
  __device__ __forceinline__ static void rescale_o(TensorO& acc_o, const float (&rescale)[kRows]) {
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
#pragma unroll
      for (int ni = 0; ni < size<1>(acc_o); ++ni) acc_o(mi, ni) *= rescale[mi];
    }
  }

  // A value computed from every row sum: what a caller that overlaps the softmax with other work
  // makes its next wait depend on (sm90::wait_after), so that the wait comes after the softmax.
  __device__ __forceinline__ uint32_t sums_token() const {
    uint32_t token = 0;
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) token ^= __float_as_uint(row_sum[mi]);
    return token;
  }

  // Divides O by the row sums and returns each row's log-sum-exp (natural log, of the scaled
  // scores) in lse[]. Each row is one merge state: the running max (raw scores, scaled by lse())
  // and the quad-reduced sum, with no NaN flag (a NaN score is already in the sum).
  template <typename TensorO>
  __device__ __forceinline__ void finalize(TensorO& acc_o, float scale, float (&lse)[kRows]) {
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      const SoftmaxMergeState row{row_max[mi], sm80::quad_sum(row_sum[mi]), false};
      const float inv = row.inv_sum();
      lse[mi] = row.lse</*kFastLog=*/false>(scale);
#pragma unroll
      for (int ni = 0; ni < size<1>(acc_o); ++ni) acc_o(mi, ni) *= inv;
    }
  }
};

}  // namespace cute_ops
