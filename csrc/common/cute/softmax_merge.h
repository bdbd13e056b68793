#pragma once
// The log-sum-exp merge of attention partials, and its rules, in one place.
//
// A partial is a softmax over some of a row's keys: its output O_i, normalised or not, and its
// lse_i = log sum exp(scores) (natural log, scaled scores). The merged row is
//   out = sum_i exp(lse_i - M) O_i / sum_i exp(lse_i - M),  lse = M + log sum_i exp(lse_i - M),
// M = max_i lse_i. SoftmaxMergeState holds M (`max`), the sum (`sum`) and a NaN flag; the caller
// keeps its output accumulator and scales it by the factors that merge() returns. Used by the
// online softmax's finalize (a state built from its running max and sum), flash_decode's merge of
// its warps and flash_decode's merge of its splits. It is not CuTe code; it lives with the online
// softmax that is its first user.
//
// Empty and NaN, the rules every user shares:
//  - A partial with lse = -inf saw no keys (every score masked): it is empty, weighs 0, and its
//    output is not needed. A row whose partials are all empty has sum 0: out 0 (1/sum reads as 0)
//    and lse -inf. Only that is empty.
//  - NaN is never empty. A NaN lse (a NaN in Q or K reached the scores, or the producer poisoned
//    the row) makes the row's out and lse NaN. fmaxf would drop it from the max, so merge() notes
//    it in `nan` and leaves that partial out of the sum; inv_sum() and lse() then return NaN, and
//    so does any output scaled by inv_sum(). poison() sets the flag directly (a row the producer
//    knows to be bad).
//  - A NaN in sum (finalize: a NaN score went into the exponentials) propagates through 1/sum and
//    log(sum) by itself; sum == 0, not sum > 0, is the empty test so that it does.
//  - A NaN in a partial's output alone (from V) is no business of the state: it reaches out
//    through the caller's weighted sum, with a finite lse.
//
// Exponentials of the merges are __expf (fast-math intrinsics, as the decode kernels have always
// used). The first merge into an empty state rescales by a constant 0, so a one-batch merge
// compiles to no more than the plain weighted sum.
#include <cmath>

namespace cute_ops {

struct SoftmaxMergeState {
  float max;  // largest lse merged so far (natural log; see lse()); -inf while every partial was empty
  float sum;  // sum of exp(lse_i - max) over the non-empty partials merged so far
  bool nan;   // a merged lse was NaN, or the row was poisoned

  // The state of no partials. (The type has no default member initialisers: trivially
  // constructible, it can sit in __shared__.)
  static __device__ __forceinline__ SoftmaxMergeState empty() { return {-INFINITY, 0.f, false}; }

  // A partial that takes part in the weighted sum: neither empty (-inf) nor NaN.
  static __device__ __forceinline__ bool live(float lse) { return lse > -INFINITY; }

  // Merges a batch of partial states (another state merged over other partials, e.g. another
  // warp's), all loaded before any is used. Returns the factor by which output accumulated from
  // earlier merges must be rescaled (0 while nothing was merged: that output is still 0);
  // weight[j] is the factor for part j's accumulated output, 0 unless part j is live.
  template <int N>
  __device__ __forceinline__ float merge(const SoftmaxMergeState (&part)[N], float (&weight)[N]) {
    float new_max = max;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      nan |= part[j].nan;
      new_max = fmaxf(new_max, part[j].max);  // drops a NaN lse: the flag has it
    }
    // A batch that leaves the state empty must not compute exp(-inf - -inf) = NaN. When max was
    // -inf the exponential gives 0 by itself.
    const float rescale = new_max == -INFINITY ? 0.f : __expf(max - new_max);
    // Nothing merged yet: sum is 0 and stays so. Skipping the multiply then also lets the first
    // merge into a fresh state (max a known -inf) drop the rescale's exponential altogether.
    if (max > -INFINITY) sum *= rescale;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      weight[j] = live(part[j].max) ? __expf(part[j].max - new_max) : 0.f;
      // Only live parts are added: an empty one adds nothing, a NaN one is in the flag. The add
      // is conditional and separate from the multiply above (sum * rescale rounds first, then
      // each weight: the order the split merge has always rounded in).
      if (live(part[j].max)) sum += weight[j] * part[j].sum;
    }
    max = new_max;
    return rescale;
  }

  // A batch of partial lse values: each a part of sum 1 (its own max), NaN flagged.
  template <int N>
  __device__ __forceinline__ float merge(const float (&lse)[N], float (&weight)[N]) {
    SoftmaxMergeState part[N];
#pragma unroll
    for (int j = 0; j < N; ++j) part[j] = {lse[j], 1.f, isnan(lse[j])};
    return merge(part, weight);
  }

  // One partial lse.
  __device__ __forceinline__ float merge(float lse, float& weight) {
    const float one[1] = {lse};
    float w[1];
    const float rescale = merge(one, w);
    weight = w[0];
    return rescale;
  }

  // Marks the row bad: its out and lse become NaN whatever was merged.
  __device__ __forceinline__ void poison(bool bad = true) { nan |= bad; }

  // 1 / sum, the factor that normalises the merged output: 0 for an empty row, NaN for a NaN row.
  // The flag replaces the result after it is computed (a select, not a branch around the MUFU).
  __device__ __forceinline__ float inv_sum() const {
    const float inv = sum == 0.f ? 0.f : 1.f / sum;
    return nan ? NAN : inv;
  }

  // The merged log-sum-exp: -inf for an empty row, NaN for a NaN row. kFastLog: __logf (the
  // decode merges) or logf (the online softmax's finalize, which has always used that name;
  // under --use_fast_math, as the build compiles, both are the same instruction). max_scale: the
  // unit of `max`, 1 for merged lse values. finalize's state keeps its raw score max and passes
  // the softmax scale here, so that the multiply sits next to the add and fuses into it (one
  // FFMA, max * scale + log(sum)) as the forward has always rounded it; scaled before the branch
  // on sum, it would round separately and the log's multiply would fuse instead.
  template <bool kFastLog = true>
  __device__ __forceinline__ float lse(float max_scale = 1.f) const {
    const float lse = sum == 0.f ? -INFINITY : max * max_scale + (kFastLog ? __logf(sum) : logf(sum));
    return nan ? NAN : lse;
  }
};

}  // namespace cute_ops
