#pragma once
// FlashAttention-2 forward, one CTA per (kBlockM queries, batch, head).
//
// Mainloop over key tiles, last to first (only the first few need masking): Q stays in shared
// memory; K and V tiles arrive by cp.async, each issued one step ahead of its use: V_j is in
// flight while S = Q K_j^T runs, K_{j-1} while the softmax and O += P V_j run. The online softmax
// and P stay in registers. Epilogue: O / l rounded to 16 bits, staged through Q's buffer for
// 16-byte stores, and the log-sum-exp in float32.
//
// Partition names follow CuTe's convention: tXgY / tXsY / tXrY are thread X-partitions of the
// global / shared / register tensor Y (X = Q, K, V, O for copies; S, O for the two MMAs), and
// tXcY the matching coordinate (identity) tensors used for predication.
#include <cute/tensor.hpp>

#include "common/cute/online_softmax.h"
#include "common/cute/sm80_copy.h"
#include "common/cute/sm80_gemm.h"
#include "common/cute/sm80_mma.h"
#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/kernel_traits.h"
#include "flash_fwd/mask.h"
#include "flash_fwd/seq_info.h"

namespace cute_ops::flash {

using namespace cute;
using sm80::acc_as_a_operand;
using sm80::acc_rowcol;
using sm80::convert_to;
using sm80::gemm_rs;
using sm80::gemm_ss;

template <typename Traits, bool kIsCausal>
__global__ void __launch_bounds__(Traits::kNThreads) flash_fwd_kernel(const __grid_constant__ FlashFwdParams p) {
  using Element = typename Traits::Element;
  using index_t = FlashFwdParams::index_t;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  extern __shared__ __align__(128) char smem[];

  // With causal masking the last row-blocks see the most keys: start them first so the grid does
  // not end on a wave of long blocks.
  const int m_block = kIsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int bidb = blockIdx.y;
  const int bidh = blockIdx.z;
  const int bidh_k = bidh / (p.h / p.h_k);
  const int tid = threadIdx.x;

  if (p.cu_seqlens_q != nullptr &&
      !check_varlen_sequence<Element, kBlockM, kHeadDim, Traits::kNThreads>(p, bidb, bidh)) {
    return;
  }
  const SeqInfo seq(p, bidb);
  if (m_block * kBlockM >= seq.seqlen_q) return;  // varlen: this sequence is shorter than the grid

  int n_block_max = ceil_div(seq.seqlen_k, kBlockN);
  if constexpr (kIsCausal) {
    n_block_max = min(n_block_max, ceil_div((m_block + 1) * kBlockM + seq.seqlen_k - seq.seqlen_q, kBlockN));
  }

  // Whole tensors of this (sequence, head): (rows, head dim).
  const Element* q_ptr = static_cast<const Element*>(p.q) + seq.q_offset(p.q_batch_stride, p.q_row_stride, bidb) +
                         bidh * p.q_head_stride;
  const Element* k_ptr = static_cast<const Element*>(p.k) + seq.k_offset(p.k_batch_stride, p.k_row_stride, bidb) +
                         bidh_k * p.k_head_stride;
  const Element* v_ptr = static_cast<const Element*>(p.v) + seq.k_offset(p.v_batch_stride, p.v_row_stride, bidb) +
                         bidh_k * p.v_head_stride;
  Element* o_ptr = static_cast<Element*>(p.o) + seq.q_offset(p.o_batch_stride, p.o_row_stride, bidb) +
                   bidh * p.o_head_stride;
  float* lse_ptr = p.lse + (p.cu_seqlens_q ? seq.q_start : bidb * p.lse_batch_stride) + bidh * p.lse_head_stride;

  const auto tile_q = Shape<Int<kBlockM>, Int<kHeadDim>>{};
  const auto tile_kv = Shape<Int<kBlockN>, Int<kHeadDim>>{};
  Tensor mQ = make_tensor(make_gmem_ptr(q_ptr), make_shape(seq.seqlen_q, Int<kHeadDim>{}), make_stride(p.q_row_stride, _1{}));
  Tensor mK = make_tensor(make_gmem_ptr(k_ptr), make_shape(seq.seqlen_k, Int<kHeadDim>{}), make_stride(p.k_row_stride, _1{}));
  Tensor mV = make_tensor(make_gmem_ptr(v_ptr), make_shape(seq.seqlen_k, Int<kHeadDim>{}), make_stride(p.v_row_stride, _1{}));
  Tensor mO = make_tensor(make_gmem_ptr(o_ptr), make_shape(seq.seqlen_q, Int<kHeadDim>{}), make_stride(p.o_row_stride, _1{}));
  Tensor gQ = local_tile(mQ, tile_q, make_coord(m_block, 0));   // (kBlockM, kHeadDim)
  Tensor gK = local_tile(mK, tile_kv, make_coord(_, 0));        // (kBlockN, kHeadDim, n_blocks)
  Tensor gV = local_tile(mV, tile_kv, make_coord(_, 0));        // (kBlockN, kHeadDim, n_blocks)
  Tensor gO = local_tile(mO, tile_q, make_coord(m_block, 0));   // (kBlockM, kHeadDim)
  const int rows_q = seq.seqlen_q - m_block * kBlockM;           // valid rows of this Q tile

  if (n_block_max <= 0) {
    // Causal with seqlen_q > seqlen_k: every query of this tile precedes all keys.
    for (int i = tid; i < kBlockM * kHeadDim; i += Traits::kNThreads) {
      const int r = i / kHeadDim, c = i % kHeadDim;
      if (r < rows_q) gO(r, c) = Element(0.f);
    }
    for (int r = tid; r < kBlockM && r < rows_q; r += Traits::kNThreads) lse_ptr[m_block * kBlockM + r] = -INFINITY;
    return;
  }

  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});
  Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});
  Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});
  Tensor sVtNoSwizzle = make_tensor(sV.data(), typename Traits::SmemLayoutVtNoSwizzle{});

  typename Traits::GmemTiledCopyQKV gmem_copy;
  auto gmem_thr_copy = gmem_copy.get_thread_slice(tid);
  Tensor tQgQ = gmem_thr_copy.partition_S(gQ);  // (CPY, CPY_M, CPY_K)
  Tensor tQsQ = gmem_thr_copy.partition_D(sQ);
  Tensor tKgK = gmem_thr_copy.partition_S(gK);  // (CPY, CPY_N, CPY_K, n_blocks)
  Tensor tKsK = gmem_thr_copy.partition_D(sK);
  Tensor tVgV = gmem_thr_copy.partition_S(gV);
  Tensor tVsV = gmem_thr_copy.partition_D(sV);
  Tensor tQcQ = gmem_thr_copy.partition_S(make_identity_tensor(tile_q));    // row coordinates for predication
  Tensor tKVcKV = gmem_thr_copy.partition_S(make_identity_tensor(tile_kv));

  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);             // (MMA, MMA_M, MMA_K)
  Tensor tSrK = thr_mma.partition_fragment_B(sK);             // (MMA, MMA_N, MMA_K)
  Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);  // (MMA, MMA_K, MMA_N)
  Tensor acc_o = partition_fragment_C(tiled_mma, tile_q);     // (MMA, MMA_M, MMA_K)

  auto smem_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_q = smem_copy_q.get_thread_slice(tid);
  Tensor tSsQ = smem_thr_copy_q.partition_S(sQ);
  auto smem_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_k = smem_copy_k.get_thread_slice(tid);
  Tensor tSsK = smem_thr_copy_k.partition_S(sK);
  auto smem_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  auto smem_thr_copy_v = smem_copy_v.get_thread_slice(tid);
  Tensor tOsVt = smem_thr_copy_v.partition_S(sVt);

  // (row, col) of each S accumulator element within its tile, for masking.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

  // Prologue: Q and the last K tile (the only possibly partial one).
  int n_block = n_block_max - 1;
  sm80::copy_predicated</*kCheckCols=*/false>(gmem_copy, tQgQ, tQsQ, tQcQ, rows_q);
  sm80::copy_predicated</*kCheckCols=*/false>(gmem_copy, tKgK(_, _, _, n_block), tKsK, tKVcKV,
                                              seq.seqlen_k - n_block * kBlockN);
  cp_async_fence();
  if (p.negate_q) {
    // Each thread flips the sign of the Q chunks it loaded itself (visible to it after its own
    // wait); the first __syncthreads of the mainloop publishes them.
    cp_async_wait<0>();
#pragma unroll
    for (int m = 0; m < size<1>(tQsQ); ++m) {
#pragma unroll
      for (int k = 0; k < size<2>(tQsQ); ++k) {
        uint4* chunk = reinterpret_cast<uint4*>(&tQsQ(0, m, k));  // one 16-byte cp.async destination
        uint4 v = *chunk;
        v.x ^= 0x80008000u, v.y ^= 0x80008000u, v.z ^= 0x80008000u, v.w ^= 0x80008000u;  // 16-bit sign bits
        *chunk = v;
      }
    }
  }
  clear(acc_o);

  constexpr int kRows = 2 * decltype(size<1>(acc_o))::value;
  OnlineSoftmax<kRows> softmax;
  Tensor acc_o_rc = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));

  // Key tiles [0, n_block_unmasked) lie wholly inside the sequence and (causal) at or below every
  // query's diagonal; the tiles above them, visited first, are masked.
  int n_block_unmasked = seq.seqlen_k / kBlockN;
  if constexpr (kIsCausal) {
    // The tile's last key must be visible to the tile's first query: (n + 1) kBlockN - 1 <= row0 + shift.
    const int first_row_last_key = m_block * kBlockM + seq.seqlen_k - seq.seqlen_q;
    n_block_unmasked = min(n_block_unmasked, first_row_last_key < 0 ? 0 : (first_row_last_key + 1) / kBlockN);
  }
  auto step = [&](auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});  // (MMA, MMA_M, MMA_N)
    clear(acc_s);
    cp_async_wait<0>();
    __syncthreads();  // K_j has landed; every warp is done reading V_{j+1}
    if constexpr (kMasked) {
      sm80::copy_predicated</*kCheckCols=*/false>(gmem_copy, tVgV(_, _, _, n_block), tVsV, tKVcKV,
                                                  seq.seqlen_k - n_block * kBlockN);
    } else {
      copy(gmem_copy, tVgV(_, _, _, n_block), tVsV);
    }
    cp_async_fence();

    gemm_ss(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_copy_q, smem_thr_copy_k);
    if constexpr (kMasked) {
      apply_mask<kIsCausal>(acc_s, tScS, m_block * kBlockM, n_block * kBlockN, seq.seqlen_q, seq.seqlen_k);
    }

    cp_async_wait<0>();
    __syncthreads();  // V_j has landed; every warp is done reading K_j
    if (n_block > 0) {
      copy(gmem_copy, tKgK(_, _, _, n_block - 1), tKsK);
      cp_async_fence();
    }

    Tensor scores = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
    softmax.update(scores, acc_o_rc, p.scale_softmax_log2);
    Tensor rP = convert_to<Element>(acc_s);
    Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
    gemm_rs(acc_o, tOrP, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_copy_v);
  };

  // Two call sites only: with a third the compiler stopped inlining `step`, and the accumulators
  // went to local memory (a 1.9 KB stack frame, 10x slower).
#pragma unroll 1
  for (; n_block >= n_block_unmasked; --n_block) step(cute::true_type{});
#pragma unroll 1
  for (; n_block >= 0; --n_block) step(cute::false_type{});

  // Epilogue.
  float lse[kRows];
  softmax.finalize(acc_o_rc, p.scale_softmax, lse);
  Tensor rO = convert_to<Element>(acc_o);
  Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});  // each warp overwrites only its own Q rows
  auto smem_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);
  auto smem_thr_copy_o = smem_copy_o.get_thread_slice(tid);
  copy(smem_copy_o, smem_thr_copy_o.retile_S(rO), smem_thr_copy_o.partition_D(sO));

  // Rows of this thread's accumulator; the thread holding column 0 of a row writes its lse.
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(tile_q));  // (MMA, MMA_M, MMA_K)
  Tensor tOcO_rc = make_tensor(tOcO.data(), acc_rowcol(tOcO.layout()));
  if (get<1>(tOcO_rc(0, 0)) == 0) {
#pragma unroll
    for (int mi = 0; mi < kRows; ++mi) {
      const int row = get<0>(tOcO_rc(mi, 0));
      if (row < rows_q) lse_ptr[m_block * kBlockM + row] = lse[mi];
    }
  }

  __syncthreads();  // O tile complete in shared memory
  typename Traits::GmemTiledCopyO gmem_copy_o;
  auto gmem_thr_copy_o = gmem_copy_o.get_thread_slice(tid);
  Tensor tOsO = gmem_thr_copy_o.partition_S(sO);  // (CPY, CPY_M, CPY_K)
  Tensor tOgO = gmem_thr_copy_o.partition_D(gO);
  Tensor tOrO = make_tensor<Element>(shape(tOgO));
  copy(gmem_copy_o, tOsO, tOrO);
  Tensor tOcO_copy = gmem_thr_copy_o.partition_D(make_identity_tensor(tile_q));
#pragma unroll
  for (int m = 0; m < size<1>(tOrO); ++m) {
    if (get<0>(tOcO_copy(0, m, 0)) < rows_q) copy(gmem_copy_o, tOrO(_, m, _), tOgO(_, m, _));
  }
}

}  // namespace cute_ops::flash
