#pragma once
// Where one sequence's rows start and how long it is, for the padded and the varlen layouts alike;
// and, for varlen, the checks of the offsets, which live on the device.
#include <cmath>

#include "common/device_errors.h"
#include "flash_fwd/flash_fwd.h"

namespace cute_ops::flash {

struct SeqInfo {
  using index_t = FlashFwdParams::index_t;
  int seqlen_q, seqlen_k;
  index_t q_start, k_start;  // first row in the packed (varlen) tensors; 0 otherwise

  __device__ SeqInfo(const FlashFwdParams& p, int bidb)
      : seqlen_q(p.cu_seqlens_q ? p.cu_seqlens_q[bidb + 1] - p.cu_seqlens_q[bidb] : p.seqlen_q),
        seqlen_k(p.cu_seqlens_k ? p.cu_seqlens_k[bidb + 1] - p.cu_seqlens_k[bidb] : p.seqlen_k),
        q_start(p.cu_seqlens_q ? p.cu_seqlens_q[bidb] : 0),
        k_start(p.cu_seqlens_k ? p.cu_seqlens_k[bidb] : 0) {}

  // Exactly one term is non-zero: varlen sets the batch strides to 0, the padded layout has no starts.
  __device__ index_t q_offset(index_t batch_stride, index_t row_stride, int bidb) const {
    return q_start * row_stride + bidb * batch_stride;
  }
  __device__ index_t k_offset(index_t batch_stride, index_t row_stride, int bidb) const {
    return k_start * row_stride + bidb * batch_stride;
  }
};

// Writes out = value and lse = lse_value to rows [lo, hi) of head `head` (varlen layout), the
// rows spread over the grid's x dimension: every CTA of one (sequence, head) takes its share, so
// a span of any length is covered whatever the grid was sized for.
template <typename Element, int kBlockM, int kHeadDim, int kThreads>
__device__ void fill_varlen_rows(const FlashFwdParams& p, int head, int lo, int hi, float value, float lse_value) {
  Element* o = static_cast<Element*>(p.o) + head * p.o_head_stride;
  float* lse = p.lse + head * p.lse_head_stride;
  for (int row0 = lo + blockIdx.x * kBlockM; row0 < hi; row0 += gridDim.x * kBlockM) {
    for (int i = threadIdx.x; i < kBlockM * kHeadDim; i += kThreads) {
      const int row = row0 + i / kHeadDim;
      if (row < hi) o[static_cast<FlashFwdParams::index_t>(row) * p.o_row_stride + i % kHeadDim] = Element(value);
    }
    for (int i = threadIdx.x; i < kBlockM && row0 + i < hi; i += kThreads) lse[row0 + i] = lse_value;
  }
}

// What is wrong with sequence bidb's offsets (code 0: nothing), with the values a report names.
// Pure arithmetic on the offsets, no call: the SM90 kernel skips a bad sequence with it, while
// the reporting (a call, which would serialise the kernel's wgmma) runs in a kernel of its own.
struct VarlenCheck {
  DeviceErrorCode code;
  long long value, aux, aux2;
};

__device__ __forceinline__ VarlenCheck varlen_sequence_check(const FlashFwdParams& p, int bidb) {
  const int q0 = p.cu_seqlens_q[bidb], q1 = p.cu_seqlens_q[bidb + 1];
  const int k0 = p.cu_seqlens_k[bidb], k1 = p.cu_seqlens_k[bidb + 1];
  if (q0 < 0 || q1 < q0 || q1 > p.total_q) return {DeviceErrorCode::kQueryOffsets, q0, q1, p.total_q};
  if (k0 < 0 || k1 < k0 || k1 > p.total_k) return {DeviceErrorCode::kKeyOffsets, k0, k1, p.total_k};
  if (q1 - q0 > p.seqlen_q) return {DeviceErrorCode::kQueryTooLong, q1 - q0, p.seqlen_q, 0};
  if (k1 - k0 > p.seqlen_k) return {DeviceErrorCode::kKeyTooLong, k1 - k0, p.seqlen_k, 0};
  return {DeviceErrorCode{}, 0, 0, 0};
}

// Varlen only, before anything else of sequence bidb is read: its offsets must lie within q's and
// k's rows in order (0 <= start <= end <= total) and its lengths within max_seqlen_q/k (the grid
// covers max_seqlen_q rows a sequence). A bad sequence is reported once (by the first CTA of its
// first head) and its rows, where they are rows of q at all, get NaN; the CTA is then done.
// Rows that no sequence owns (before cu_seqlens_q[0], after cu_seqlens_q[batch]) get out 0 and
// lse -inf, as queries that see no key, so that no output row is left unwritten. Returns whether
// the CTA goes on to compute its tile. Overlapping sequences cannot be told apart from here: a
// decreasing cu_seqlens is reported at the pair that decreases, and the output of the sequences
// around it is then undefined (but every access stays within q, k and out).
template <typename Element, int kBlockM, int kHeadDim, int kThreads>
__device__ bool check_varlen_sequence(const FlashFwdParams& p, int bidb, int bidh) {
  const VarlenCheck check = varlen_sequence_check(p, bidb);
  const int q0 = p.cu_seqlens_q[bidb], q1 = p.cu_seqlens_q[bidb + 1];
  if (check.code == DeviceErrorCode{}) {
    if (bidb == 0 && q0 > 0) fill_varlen_rows<Element, kBlockM, kHeadDim, kThreads>(p, bidh, 0, q0, 0.f, -INFINITY);
    if (bidb == p.b - 1 && q1 < p.total_q) {
      fill_varlen_rows<Element, kBlockM, kHeadDim, kThreads>(p, bidh, q1, p.total_q, 0.f, -INFINITY);
    }
    return true;
  }
  if (blockIdx.x == 0 && bidh == 0 && threadIdx.x == 0) {
    report_device_error(p.errors, DeviceErrorOp::kFlashFwdVarlen, check.code, bidb, check.value, check.aux,
                        check.aux2);
  }
  const int lo = min(max(q0, 0), p.total_q);
  const int hi = min(max(q1, lo), p.total_q);
  fill_varlen_rows<Element, kBlockM, kHeadDim, kThreads>(p, bidh, lo, hi, NAN, NAN);
  return false;
}

// The varlen checks alone, for a kernel that does not run them itself (the SM90 one, which only
// skips a bad sequence): grid (1, batch, heads), kThreads threads. Fills the rows no sequence owns
// and a bad sequence's rows, and reports the bad sequences, as check_varlen_sequence does.
template <typename Element, int kBlockM, int kHeadDim, int kThreads>
__global__ void __launch_bounds__(kThreads) varlen_checks_kernel(const __grid_constant__ FlashFwdParams p) {
  check_varlen_sequence<Element, kBlockM, kHeadDim, kThreads>(p, blockIdx.y, blockIdx.z);
}

}  // namespace cute_ops::flash
