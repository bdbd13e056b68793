#pragma once
// Masking of one S tile: key columns past the sequence end, and, when causal, keys after the
// query's diagonal, aligned bottom-right (query i sees key j iff j <= i + seqlen_k - seqlen_q).
#include <cute/tensor.hpp>

#include <cmath>

namespace cute_ops::flash {

using namespace cute;

// acc_s and coords share a layout: coords(i) is the (row, col) of acc_s(i) within the tile.
template <bool kIsCausal, typename TensorS, typename TensorC>
__device__ __forceinline__ void apply_mask(TensorS& acc_s, const TensorC& coords, int row0, int col0,
                                           int seqlen_q, int seqlen_k) {
  const int diagonal_shift = seqlen_k - seqlen_q;
#pragma unroll
  for (int i = 0; i < size(acc_s); ++i) {
    const int row = row0 + get<0>(coords(i));
    const int col = col0 + get<1>(coords(i));
    const bool masked = col >= seqlen_k || (kIsCausal && col > row + diagonal_shift);
    if (masked) acc_s(i) = -INFINITY;
  }
}

}  // namespace cute_ops::flash
