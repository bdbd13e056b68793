#pragma once
// The end of a split CTA (num_splits > 1): it has written its rows' float32 partials, and the last
// CTA of its (sequence, kv head, row block) to arrive merges every split's partials into out and
// lse, in the same launch. Arrivals are counted in zeroed counters that the last arriver resets
// (common/arrival_counters.h), one per (sequence, kv head, row block). The combine launch this
// replaced waited for the whole grid to drain; here the merge starts as soon as the row's own last
// split ends (measured on an H200, session 27: 0.1-0.8 us faster a call at 512-2k keys, as
// programmatic dependent launch had already hidden most of the second launch).
//
// Memory order: every thread fences its partial stores before the CTA's arrival (an atomic add by
// thread 0 after a barrier), and the last CTA fences after seeing the count, then reads the
// partials past L1 (ld.global.cg), so it sees what every other split wrote before arriving.
//
// The merge is the lse-weighted sum of SoftmaxMergeState (common/cute/softmax_merge.h: empty and
// NaN rules), splits taken in index order whichever CTA arrives last, so the result does not
// depend on the order the CTAs ran in. A thread takes four adjacent columns of one row and loads
// kBatch splits' lse and O before using any (one L2 round trip per kBatch splits).
#include "common/cute/softmax_merge.h"
#include "flash_decode/flash_decode.h"

namespace cute_ops::decode {

// Packed row r of kv head bidh_k: (token i, query head), and its index in the [b, h, sq] lse
// order that the partials use too.
struct PackedRow {
  int token, head;
  FlashDecodeParams::index_t lse_row;
  __device__ __forceinline__ PackedRow(const FlashDecodeParams& p, int bidb, int bidh_k, int r) {
    const int group = p.h / p.h_k;
    token = r / group;
    head = bidh_k * group + (r - token * group);
    lse_row = (static_cast<FlashDecodeParams::index_t>(bidb) * p.h + head) * p.sq + token;
  }
};

// Four adjacent output columns [col, col + 4) of one row, rounded to Element.
template <typename Element>
__device__ __forceinline__ void store_out4(const FlashDecodeParams& p, int bidb, const PackedRow& row, int col,
                                           float4 o) {
  Element* out = static_cast<Element*>(p.o) + bidb * p.o_batch_stride + row.token * p.o_row_stride +
                 row.head * p.o_head_stride;
  Element packed[4] = {static_cast<Element>(o.x), static_cast<Element>(o.y), static_cast<Element>(o.z),
                       static_cast<Element>(o.w)};
  *reinterpret_cast<uint2*>(out + col) = *reinterpret_cast<const uint2*>(packed);
}

// Called by every thread of a split CTA after its partial stores, with the CTA's rows
// [first_row, first_row + valid_rows) of kv head bidh_k; `counter` is the CTA's arrival counter.
// Returns at once in every CTA but the last to arrive, which merges the rows and resets the counter.
template <typename Element, int kHeadDim, int kThreads>
__device__ void merge_splits_if_last(const FlashDecodeParams& p, int* counter, int bidb, int bidh_k, int first_row,
                                     int valid_rows) {
  using index_t = FlashDecodeParams::index_t;
  __shared__ int s_last;
  __threadfence();  // this thread's partials are visible device-wide before the arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    s_last = atomicAdd(counter, 1) == p.num_splits - 1;
    if (s_last) *counter = 0;  // every split has arrived: the next launch on the stream finds it zero
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();  // the other splits' partials, published before their arrivals, are seen below

  constexpr int kThreadsPerRow = kHeadDim / 4;
  constexpr int kBatch = 16;
  const index_t total = static_cast<index_t>(p.b) * p.h * p.sq;  // rows of one split's partials
  const int n = p.num_splits;
  const int col = (threadIdx.x % kThreadsPerRow) * 4;
  for (int r = threadIdx.x / kThreadsPerRow; r < valid_rows; r += kThreads / kThreadsPerRow) {
    const PackedRow row(p, bidb, bidh_k, first_row + r);
    const float* o_row = p.o_partial + row.lse_row * kHeadDim + col;
    SoftmaxMergeState state = SoftmaxMergeState::empty();
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < n; s0 += kBatch) {
      float lse[kBatch];
      float4 o[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j;
        lse[j] = s < n ? __ldcg(p.lse_partial + s * total + row.lse_row) : -INFINITY;
        if (s < n) o[j] = __ldcg(reinterpret_cast<const float4*>(o_row + s * total * kHeadDim));
      }
      float wt[kBatch];
      const float rescale = state.merge(lse, wt);
      acc.x *= rescale, acc.y *= rescale, acc.z *= rescale, acc.w *= rescale;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (SoftmaxMergeState::live(lse[j])) {  // o[j] was loaded and belongs in the sum
          acc.x += wt[j] * o[j].x, acc.y += wt[j] * o[j].y, acc.z += wt[j] * o[j].z, acc.w += wt[j] * o[j].w;
        }
      }
    }
    const float inv = state.inv_sum();
    store_out4<Element>(p, bidb, row, col, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
    if (col == 0) p.lse[row.lse_row] = state.lse();
  }
}

}  // namespace cute_ops::decode
