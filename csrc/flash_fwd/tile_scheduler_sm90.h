#pragma once
// Which (query tile, batch, head) a CTA of the SM90 forward computes. One tile a CTA, from the
// grid: x the query tiles, y the batch, z the heads, as the SM80 kernel. With causal masking the
// last query tiles see the most keys, so they start first and the grid does not end on a wave
// of long tiles. A persistent scheduler (tiles taken by a fixed set of CTAs, heads interleaved
// so K and V stay in L2) is to sit behind the same interface.
#include <cuda_runtime_api.h>

#include "flash_fwd/flash_fwd.h"

namespace cute_ops::flash {

struct ForwardTile {
  int m_block, bidb, bidh;
};

template <int kBlockM, bool kIsCausal>
struct StaticTileScheduler {
  static dim3 grid(const FlashFwdParams& p) {
    return dim3((p.seqlen_q + kBlockM - 1) / kBlockM, p.b, p.h);
  }

  __device__ static ForwardTile tile() {
    const int m_block = kIsCausal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    return {m_block, static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  }
};

}  // namespace cute_ops::flash
