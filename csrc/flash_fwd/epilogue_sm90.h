#pragma once
// The SM90 forward epilogue: O / l rounded to 16 bits, staged through shared memory (O's own
// buffer, or Q's: Traits::kSeparateO) and written by one TMA store, which drops the rows past the
// sequence's end by itself (the tensor's bounds); the log-sum-exp in float32 from registers.
// Varlen: the rows past a packed sequence's end are the next sequence's, which a TMA store of the
// whole tile would overwrite, so there the consumers copy the staged tile out with 16-byte stores
// of the sequence's rows only.
//
// Each consumer warp group stages and stores its own 64 rows, with its own named barrier. The
// staging buffer's turns, with several tiles a CTA:
//   - O's own buffer: the store is left in flight; the group's next epilogue waits for it to have
//     read the rows (and for the group's varlen copy-out) before staging again, and finish()
//     before the CTA exits.
//   - Q's buffer: rows of Q that only the same warp group's S = Q K^T read, all completed before
//     its softmax; the store is waited for at once, and then the consumers arrive on q_empty,
//     which lets the producer load the next tile's Q over it.
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "common/cute/sm80_mma.h"
#include "common/cute/sm90_mma.h"
#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/seq_info.h"
#include "flash_fwd/tma_layout.h"

namespace cute_ops::flash {

using namespace cute;

template <typename Traits>
struct EpilogueSm90 {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM, kHeadDim = Traits::kHeadDim, kMmaThreads = Traits::kMmaThreads;
  using SharedStorage = typename Traits::SharedStorage;
  using Tile = Shape<Int<kBlockM>, Int<kHeadDim>>;
  using TileGroup = Shape<_64, Int<kHeadDim>>;  // one consumer warp group's rows
  static_assert(Traits::kSeparateO || Traits::kQStages == 1, "O staged in Q's buffer takes a single one");

  struct Params {
    typename Traits::TmaO tma_o;
  };

  static Params make_params(const FlashFwdParams& p) {
    constexpr int e = sizeof(Element);
    const TmaExtents x(p);  // varlen builds this store too, and never issues it
    auto o = make_tensor(make_gmem_ptr(static_cast<Element*>(p.o)), make_shape(x.rows_q, Int<kHeadDim>{}, p.h, x.batch),
                         make_stride(tma_stride(p.o_row_stride, x.rows_q, e), _1{},
                                     tma_stride(p.o_head_stride, p.h, e), tma_stride(p.o_batch_stride, x.batch, e)));
    return {make_tma_copy(SM90_TMA_STORE{}, o, typename Traits::SmemLayoutOGroup{}, TileGroup{}, _1{})};
  }

  // The consumers' threads (thread: index among them) after the mainloop: tOrO normalised in place.
  template <typename FragO, typename Softmax>
  __device__ static void store(const Params& params, const FlashFwdParams& p, const SeqInfo& seq, int m_block,
                               int bidb, int bidh, FragO& tOrO, Softmax& softmax, int thread, SharedStorage& storage) {
    typename Traits::TiledMmaO tiled_mma_o;
    auto thr_mma_o = tiled_mma_o.get_thread_slice(thread);
    constexpr int kRows = Softmax::kRowsPerThread;
    Tensor tOrO_rc = make_tensor(tOrO.data(), sm90::acc_rowcol(tOrO.layout()));
    float lse[kRows];
    softmax.finalize(tOrO_rc, p.scale_softmax, lse);

    // The rows of this thread's accumulator; the thread holding column 0 of a row writes its lse.
    Tensor tOcO = thr_mma_o.partition_C(make_identity_tensor(Tile{}));  // (MMA, MMA_M, MMA_N)
    Tensor tOcO_rc = make_tensor(tOcO.data(), sm90::acc_rowcol(tOcO.layout()));
    const int row0 = m_block * kBlockM, rows = seq.seqlen_q - row0;
    float* lse_out = lse_rows(p, seq, bidb, bidh) + row0;
    if (get<1>(tOcO_rc(0, 0)) == 0) {
#pragma unroll
      for (int mi = 0; mi < kRows; ++mi) {
        const int row = get<0>(tOcO_rc(mi, 0));
        if (row < rows) lse_out[row] = lse[mi];
      }
    }

    Tensor rO = sm80::convert_to<Element>(tOrO);
    Tensor sO = make_tensor(make_smem_ptr(Traits::o_buffer(storage)), typename Traits::SmemLayoutO{});
    // This warp group's 64 rows: it stages, stores and waits for them alone, so that one group's
    // epilogue runs while the other's last P V is on the tensor cores.
    const int group = thread / 128, lane = thread % 128;
    Tensor sOg = make_tensor(make_smem_ptr(Traits::o_buffer(storage) + group * Traits::kOGroupOffset),
                             typename Traits::SmemLayoutOGroup{});
    if constexpr (Traits::kSeparateO) {
      if (lane == 0) tma_store_wait<0>();  // the group's previous store has read its rows
      group_sync(group);                   // (and its varlen copy-out is done)
    }
    // stmatrix: one STSM a thread per four 8 x 8 blocks. A generic vectorising copy compiles to
    // 32-bit generic stores here (ST.E; the compiler cannot tell the buffer is shared memory), 32
    // a thread at head dim 128, on the consumers' serial path between the last P V and the store.
    using SmemCopyAtomO = Copy_Atom<SM90_U32x4_STSM_N, Element>;
    auto smem_copy_o = make_tiled_copy_C(SmemCopyAtomO{}, tiled_mma_o);
    auto smem_thr_copy_o = smem_copy_o.get_thread_slice(thread);
    copy(smem_copy_o, smem_thr_copy_o.retile_S(rO), smem_thr_copy_o.partition_D(sO));
    const int group_row0 = row0 + group * 64, group_rows = min(64, seq.seqlen_q - group_row0);
    if (p.cu_seqlens_q) {
      group_sync(group);  // the group's staged rows are complete
      // 16-byte chunks (a swizzle keeps each one whole), the sequence's rows only.
      constexpr int kChunks = kHeadDim / 8;
      Element* o = static_cast<Element*>(p.o) + seq.q_offset(p.o_batch_stride, p.o_row_stride, bidb) +
                   bidh * p.o_head_stride;
      for (int i = lane; i < 64 * kChunks; i += 128) {
        const int r = i / kChunks, c = i % kChunks * 8;
        if (r < group_rows) {
          *reinterpret_cast<uint4*>(o + static_cast<int64_t>(group_row0 + r) * p.o_row_stride + c) =
              *reinterpret_cast<const uint4*>(&sOg(r, c));
        }
      }
      if constexpr (!Traits::kSeparateO) cutlass::arch::ClusterBarrier::arrive(&storage.q_empty[0]);
      return;
    }
    cutlass::arch::fence_view_async_shared();  // the staging stores, before the TMA store reads them
    group_sync(group);
    if (lane == 0 && group_rows > 0) {
      const TmaExtents x(p);
      Tensor mO = params.tma_o.get_tma_tensor(make_shape(x.rows_q, Int<kHeadDim>{}, p.h, x.batch));
      const int group_block = m_block * Traits::kConsumerGroups + group;  // in units of 64 rows
      Tensor gO = local_tile(mO(_, _, bidh, bidb), TileGroup{}, make_coord(group_block, _0{}));
      auto cta_o = params.tma_o.get_slice(_0{});
      copy(params.tma_o, cta_o.partition_S(sOg), cta_o.partition_D(gO));
      tma_store_arrive();
      if constexpr (!Traits::kSeparateO) tma_store_wait<0>();  // Q's buffer is the next tile's
    }
    if constexpr (!Traits::kSeparateO) cutlass::arch::ClusterBarrier::arrive(&storage.q_empty[0]);
  }

  // After a CTA's last tile: shared memory must outlive the last stores' read of it.
  __device__ static void finish(int thread) {
    if constexpr (Traits::kSeparateO) {
      if (thread % 128 == 0) tma_store_wait<0>();
    }
  }

  // A tile none of whose queries sees a key (causal with seqlen_q > seqlen_k, or a varlen sequence
  // with no keys): out 0, lse -inf.
  __device__ static void store_empty(const FlashFwdParams& p, const SeqInfo& seq, int m_block, int bidb, int bidh,
                                     int thread) {
    Element* o = static_cast<Element*>(p.o) + seq.q_offset(p.o_batch_stride, p.o_row_stride, bidb) +
                 bidh * p.o_head_stride;
    float* lse_out = lse_rows(p, seq, bidb, bidh);
    const int row0 = m_block * kBlockM, rows = min(kBlockM, seq.seqlen_q - row0);
    for (int i = thread; i < rows * kHeadDim; i += kMmaThreads) {
      o[static_cast<int64_t>(row0 + i / kHeadDim) * p.o_row_stride + i % kHeadDim] = Element(0.f);
    }
    for (int r = thread; r < rows; r += kMmaThreads) lse_out[row0 + r] = -INFINITY;
  }

 private:
  __device__ static void group_sync(int group) {
    cutlass::arch::NamedBarrier::sync(128, Traits::kEpilogueBarrier + group);
  }

  // The lse of this (sequence, head): [b, h, seqlen_q] rows, or [h, total_q] from the sequence's
  // first row when varlen.
  __device__ static float* lse_rows(const FlashFwdParams& p, const SeqInfo& seq, int bidb, int bidh) {
    return p.lse + (p.cu_seqlens_q ? seq.q_start : bidb * p.lse_batch_stride) + bidh * p.lse_head_stride;
  }
};

}  // namespace cute_ops::flash
