#pragma once
// Tile-level helpers of the FlashAttention-2 forward kernel: predicated global -> shared copies,
// the two GEMM shapes (A and B from shared memory; A from registers), and 16-bit conversion.
#include <cute/tensor.hpp>

namespace cute_ops::flash {

using namespace cute;

// Copies the rows of a (CPY, CPY_M, CPY_K) partition whose row index (from the identity partition
// `coords`) is below max_row; the others are zero-filled, so that a partial K or V tile holds
// zeros, not stale data (0 * NaN would poison O even where P is 0).
template <typename TiledCopy, typename TensorS, typename TensorD, typename TensorC>
__device__ __forceinline__ void copy_rows(const TiledCopy& tiled_copy, const TensorS& src, TensorD& dst,
                                          const TensorC& coords, int max_row) {
#pragma unroll
  for (int m = 0; m < size<1>(src); ++m) {
    if (get<0>(coords(0, m, 0)) < max_row) {
      copy(tiled_copy, src(_, m, _), dst(_, m, _));
    } else {
      clear(dst(_, m, _));
    }
  }
}

// acc += A B^T with both operands in shared memory; the shared -> register copy of k-slice i+1
// is issued before the MMAs of slice i.
template <typename Acc, typename RA, typename RB, typename SA, typename SB, typename TiledMma, typename CopyA,
          typename CopyB, typename ThrCopyA, typename ThrCopyB>
__device__ __forceinline__ void gemm_ss(Acc& acc, RA& tCrA, RB& tCrB, const SA& tCsA, const SB& tCsB,
                                        const TiledMma& mma, const CopyA& copy_a, const CopyB& copy_b,
                                        const ThrCopyA& thr_copy_a, const ThrCopyB& thr_copy_b) {
  Tensor tCrA_view = thr_copy_a.retile_D(tCrA);
  Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
  copy(copy_a, tCsA(_, _, _0{}), tCrA_view(_, _, _0{}));
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
#pragma unroll
  for (int i = 0; i < size<2>(tCrA); ++i) {
    if (i < size<2>(tCrA) - 1) {
      copy(copy_a, tCsA(_, _, i + 1), tCrA_view(_, _, i + 1));
      copy(copy_b, tCsB(_, _, i + 1), tCrB_view(_, _, i + 1));
    }
    gemm(mma, tCrA(_, _, i), tCrB(_, _, i), acc);
  }
}

// acc += A B^T with A already in registers (P) and B in shared memory (V^T).
template <typename Acc, typename RA, typename RB, typename SB, typename TiledMma, typename CopyB, typename ThrCopyB>
__device__ __forceinline__ void gemm_rs(Acc& acc, const RA& tCrA, RB& tCrB, const SB& tCsB, const TiledMma& mma,
                                        const CopyB& copy_b, const ThrCopyB& thr_copy_b) {
  Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
  copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
#pragma unroll
  for (int i = 0; i < size<2>(tCrA); ++i) {
    if (i < size<2>(tCrA) - 1) copy(copy_b, tCsB(_, _, i + 1), tCrB_view(_, _, i + 1));
    gemm(mma, tCrA(_, _, i), tCrB(_, _, i), acc);
  }
}

// A register tensor of To with t's layout, converted element by element (round to nearest).
template <typename To, typename TensorF>
__device__ __forceinline__ auto convert_to(const TensorF& t) {
  Tensor out = make_tensor<To>(t.layout());
#pragma unroll
  for (int i = 0; i < size(t); ++i) out(i) = static_cast<To>(t(i));
  return out;
}

}  // namespace cute_ops::flash
