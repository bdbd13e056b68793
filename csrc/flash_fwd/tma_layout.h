#pragma once
// What the SM90 kernel's TMA descriptors need of q, k, v and out, and the strides they are encoded
// with. The tensor-map encoder (cuTensorMapEncodeTiled) takes strides in bytes that are multiples
// of 16 and below 2^40; CuTe's wrapper only asserts the result, which -DNDEBUG compiles out, so a
// layout it would refuse must never reach it. The op's checks already make every stride a
// multiple of 16 bytes; a broadcast (stride 0 over more than one index) is what remains, and
// such a call runs the SM80 kernel (or, with arch "sm90", is refused).
#include <cstdint>

#include "flash_fwd/flash_fwd.h"

namespace cute_ops::flash {

// The stride a dimension of `extent` indices is encoded with: its own, except for a single index,
// whose stride is never used and may be anything (0 for a broadcast batch of one), so a valid
// placeholder (16 bytes) stands in.
inline int64_t tma_stride(int64_t stride, int64_t extent, int elem_bytes) {
  return extent > 1 ? stride : 16 / elem_bytes;
}

inline bool tma_stride_ok(int64_t stride, int64_t extent, int elem_bytes) {
  const int64_t bytes = tma_stride(stride, extent, elem_bytes) * elem_bytes;
  return bytes > 0 && bytes % 16 == 0 && bytes < (int64_t{1} << 40);
}

// The tensors as TMA sees them: (rows, head dim, heads, batch). Padded: each sequence its batch
// index. Varlen: one batch of all packed rows, a sequence's tiles addressed from its first row
// (SeqInfo's q_start / k_start), so that a tile running past a sequence's end reads the next
// sequence's rows (or zeros past the last): keys there are masked, their P is 0, and the epilogue
// stores no row past the sequence.
// A varlen call of no keys at all has an empty k and v, which the encoder refuses: as no key
// block is ever loaded then, their descriptors describe one row of q instead (tma_k_source).
struct TmaExtents {
  int rows_q, rows_k, batch;
  __host__ __device__ explicit TmaExtents(const FlashFwdParams& p)
      : rows_q(p.cu_seqlens_q ? p.total_q : p.seqlen_q),
        rows_k(p.cu_seqlens_q ? (p.total_k > 0 ? p.total_k : 1) : p.seqlen_k),
        batch(p.cu_seqlens_q ? 1 : p.b) {}
};

// The tensor k's (or v's) descriptor is encoded over: `kv` itself, or q when there are no keys.
inline const void* tma_k_source(const FlashFwdParams& p, const void* kv) {
  return p.cu_seqlens_q && p.total_k == 0 ? p.q : kv;
}

// Whether the SM90 kernel takes these operands: strides that TMA encodes.
inline bool tma_accepts(const FlashFwdParams& p) {
  const TmaExtents x(p);
  const int e = 2;  // fp16 / bf16
  const bool q = tma_stride_ok(p.q_row_stride, x.rows_q, e) && tma_stride_ok(p.q_head_stride, p.h, e) &&
                 tma_stride_ok(p.q_batch_stride, x.batch, e);
  const bool o = tma_stride_ok(p.o_row_stride, x.rows_q, e) && tma_stride_ok(p.o_head_stride, p.h, e) &&
                 tma_stride_ok(p.o_batch_stride, x.batch, e);
  const bool k = tma_stride_ok(p.k_row_stride, x.rows_k, e) && tma_stride_ok(p.k_head_stride, p.h_k, e) &&
                 tma_stride_ok(p.k_batch_stride, x.batch, e);
  const bool v = tma_stride_ok(p.v_row_stride, x.rows_k, e) && tma_stride_ok(p.v_head_stride, p.h_k, e) &&
                 tma_stride_ok(p.v_batch_stride, x.batch, e);
  return q && o && k && v;
}

}  // namespace cute_ops::flash
