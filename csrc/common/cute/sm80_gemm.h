#pragma once
// The SM80 register k-loop: acc += A B^T over one tile's K, fragments loaded from shared memory
// with ldmatrix one k-slice ahead of the MMAs that use them.
#include <cute/tensor.hpp>

namespace cute_ops::sm80 {

using namespace cute;

// Both operands in shared memory (tCsA, tCsB: the ldmatrix partitions of one stage); the copy of
// k-slice i+1 is issued before the MMAs of slice i.
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

// A already in registers (attention's P), B in shared memory.
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

}  // namespace cute_ops::sm80
