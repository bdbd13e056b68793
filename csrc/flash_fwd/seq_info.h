#pragma once
// Where one sequence's rows start and how long it is, for the padded and the varlen layouts alike.
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

}  // namespace cute_ops::flash
