#pragma once
// Which (query tile, batch, head) tiles a CTA of the SM90 forward computes, and in what order.
// Both schedulers number the tiles 0..tiles-1 and hand a CTA a sequence of those numbers
// (first(), next(), done when >= tiles); tile() says what a number is. The kernel loops over the
// sequence either way, so the two are swappable (CUTE_OPS_FLASH_FWD_SM90_PERSISTENT).
//
//   StaticTileScheduler: one tile a CTA, a grid of all of them, the query tiles of a head
//     adjacent (x fastest, then batch, then head), as the SM80 kernel launches.
//   PersistentTileScheduler: a CTA per SM walks tiles in rounds of gridDim.x, so the producer
//     loads the next tile's Q, K and V while the consumers finish this one (its last P V and
//     the epilogue, whose TMA store is left in flight), instead of each CTA starting cold.
//     - Heads in L2-sized sections: within a section the tiles go query block by query block
//       across its heads, so the CTAs running at once read the K and V of a few heads, which then
//       stay in L2 (a wave spread over all heads at long sequences would stream K and V from DRAM
//       for every tile).
//     - Rounds alternate direction (CTA c takes the c-th tile of even rounds and the c-th from
//       the end of odd ones): where tile lengths change steadily along the order, a CTA that
//       took a long tile in one round takes a short one in the next, so CTAs end close together
//       without a shared counter.
//     - Causal (the last query block sees every key, the first one block): sections alternate
//       between longest-first and shortest-first, the last one longest-first, so that lengths
//       along the order have no jump from short to long for the alternation to trip on (that
//       jump at each section's start cost the 16k-key causal case 7% on an H100), and the
//       kernel ends on short tiles.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "flash_fwd/flash_fwd.h"

namespace cute_ops::flash {

struct ForwardTile {
  int m_block, bidb, bidh;
};

struct TileSchedulerParams {
  int tiles;     // m_blocks x batch x heads
  int m_blocks;  // query tiles of a sequence (of the longest, varlen)
  int heads;     // query heads
  int bh;        // batch x heads
  int section;   // (batch, head) pairs in an L2 section (PersistentTileScheduler)
};

// The K and V bytes an L2 section holds, in MB (a build knob for A/B runs:
// NVCC_APPEND_FLAGS=-DCUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB=8; docs/perf-notes.md).
#ifndef CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB
#define CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB 24
#endif

template <int kBlockM>
inline TileSchedulerParams tile_scheduler_params(const FlashFwdParams& p, int head_dim, int element_bytes) {
  TileSchedulerParams s;
  s.m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  s.heads = p.h;
  s.bh = p.b * p.h;
  s.tiles = s.m_blocks * s.bh;
  // K and V of one kv head, shared by h / h_k query heads: a section holds about 24 MB of them
  // (CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB), half of an H100's L2, leaving room for Q and O
  // passing through.
  const int64_t kv_bytes = int64_t{2} * p.seqlen_k * head_dim * element_bytes;
  const int64_t per_q_head = std::max<int64_t>(1, kv_bytes / std::max(1, p.h / p.h_k));
  s.section = static_cast<int>(std::clamp<int64_t>((int64_t{CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB} << 20) / per_q_head, 1, s.bh));
  return s;
}

template <bool kIsCausal>
struct StaticTileScheduler {
  static dim3 grid(const TileSchedulerParams& s, int /*sms*/) { return dim3(s.tiles); }
  __device__ static int first(const TileSchedulerParams&) { return blockIdx.x; }
  __device__ static int next(const TileSchedulerParams& s, int) { return s.tiles; }
  __device__ static ForwardTile tile(const TileSchedulerParams& s, int idx) {
    const int m = idx % s.m_blocks, bh = idx / s.m_blocks;
    // Causal: the last query tiles see the most keys, so they start first and the grid does not
    // end on a wave of long tiles.
    return {kIsCausal ? s.m_blocks - 1 - m : m, bh % (s.bh / s.heads), bh / (s.bh / s.heads)};
  }
};

template <bool kIsCausal>
struct PersistentTileScheduler {
  static dim3 grid(const TileSchedulerParams& s, int sms) { return dim3(std::max(1, std::min(s.tiles, sms))); }
  __device__ static int first(const TileSchedulerParams&) { return blockIdx.x; }
  __device__ static int next(const TileSchedulerParams&, int idx) {
    const int g = gridDim.x, round = idx / g + 1;
    return round * g + ((round & 1) ? g - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x));
  }
  __device__ static ForwardTile tile(const TileSchedulerParams& s, int idx) {
    const int section_tiles = s.section * s.m_blocks;
    const int section = idx / section_tiles, first_bh = section * s.section;
    const int width = min(s.section, s.bh - first_bh);  // the last section may be narrower
    const int r = idx - section * section_tiles;
    const int m = r / width, bh = first_bh + r % width;
    const int sections = (s.bh + s.section - 1) / s.section;
    const bool longest_first = kIsCausal && (sections - 1 - section) % 2 == 0;
    return {longest_first ? s.m_blocks - 1 - m : m, bh / s.heads, bh % s.heads};
  }
};

}  // namespace cute_ops::flash
