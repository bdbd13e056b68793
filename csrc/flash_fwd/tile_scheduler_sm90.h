#pragma once
// Which (query tile, batch, head) tiles a CTA of the SM90 forward computes, and in what order.
// Both schedulers number the tiles 0..tiles-1; a CTA starts at first() and asks next() for
// another until it gets one >= tiles. Only the producer thread calls next() (and finish(), once,
// after its last call); it hands each tile to the consumers with the tile's Q (the kernel's
// tile_idx and tile_coord slots). tile() says what a number is (the producer calls it, so its
// divisions stay off the consumers' path). The kernel is the same for both
// (CUTE_OPS_FLASH_FWD_SM90_PERSISTENT).
//
//   StaticTileScheduler: one tile a CTA, a grid of all of them, the query tiles of a head
//     adjacent (x fastest, then batch, then head), as the SM80 kernel launches.
//   DynamicTileScheduler: a CTA per SM; after the first wave each CTA takes the next tile from a
//     global counter as its producer is ready to load one, so the producer loads the next tile's
//     Q, K and V while the consumers finish this one, and CTAs end together whatever the tiles'
//     lengths (causal, varlen). The order:
//     - Heads in small L2 sections (CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB of K and V): within a
//       section the tiles go query block by query block across its heads, so the CTAs running at
//       once read the K and V of a few heads, all of them at about the same key blocks, and
//       each block comes from DRAM about once. (24 MB sections, whose heads' m-blocks spread
//       over three waves, hit L2 66% of the time at 2k keys against 83% for 8 MB, on an H100.)
//     - Causal: the longest tiles (last query blocks) of a section first, so the kernel ends on
//       short tiles. (Moving every head's shortest query blocks after all sections measured no
//       better on an H200: docs/perf-notes.md, session 52.)
//     The counter ([0] of two in TileSchedulerParams::counters) is the work's own
//     (arrival_counters.h): the last CTA to finish ([1] counts them) sets both back to zero.
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
  int section;   // (batch, head) pairs in an L2 section (DynamicTileScheduler)
  int* counters; // DynamicTileScheduler: tiles handed out after the first wave, CTAs done
};

// The K and V bytes an L2 section holds, in MB, without and with the causal mask (build knobs
// for A/B runs: NVCC_APPEND_FLAGS=-DCUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB=8). Measured on an
// H100 (docs/perf-notes.md, session 41): 4 MB ran D = 128 at 512 and 2k keys 2-9% faster than
// 8 MB; causal ran 16k 3% faster with 8 MB, and within noise of 4 MB elsewhere.
#ifndef CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB
#define CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB 4
#endif
#ifndef CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB_CAUSAL
#define CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB_CAUSAL 8
#endif

template <int kBlockM>
inline TileSchedulerParams tile_scheduler_params(const FlashFwdParams& p, int head_dim, int element_bytes, bool causal,
                                                 int* counters) {
  TileSchedulerParams s;
  s.counters = counters;
  s.m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  s.heads = p.h;
  s.bh = p.b * p.h;
  s.tiles = s.m_blocks * s.bh;
  // K and V of one kv head, shared by h / h_k query heads.
  const int64_t kv_bytes = int64_t{2} * p.seqlen_k * head_dim * element_bytes;
  const int64_t per_q_head = std::max<int64_t>(1, kv_bytes / std::max(1, p.h / p.h_k));
  const int64_t section_mb = causal ? CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB_CAUSAL : CUTE_OPS_FLASH_FWD_SM90_L2_SECTION_MB;
  s.section = static_cast<int>(std::clamp<int64_t>((section_mb << 20) / per_q_head, 1, s.bh));
  return s;
}

template <bool kIsCausal>
struct StaticTileScheduler {
  static dim3 grid(const TileSchedulerParams& s, int /*sms*/) { return dim3(s.tiles); }
  __device__ static int first(const TileSchedulerParams&) { return blockIdx.x; }
  __device__ static int next(const TileSchedulerParams& s, int) { return s.tiles; }
  __device__ static void finish(const TileSchedulerParams&) {}
  __device__ static ForwardTile tile(const TileSchedulerParams& s, int idx) {
    const int m = idx % s.m_blocks, bh = idx / s.m_blocks;
    // Causal: the last query tiles see the most keys, so they start first and the grid does not
    // end on a wave of long tiles.
    return {kIsCausal ? s.m_blocks - 1 - m : m, bh % (s.bh / s.heads), bh / (s.bh / s.heads)};
  }
};

template <bool kIsCausal>
struct DynamicTileScheduler {
  static dim3 grid(const TileSchedulerParams& s, int sms) { return dim3(std::max(1, std::min(s.tiles, sms))); }
  __device__ static int first(const TileSchedulerParams&) { return blockIdx.x; }
  __device__ static int next(const TileSchedulerParams& s, int) {
    return static_cast<int>(gridDim.x) + atomicAdd(&s.counters[0], 1);
  }
  // After this CTA's last next(): the last CTA here has every CTA's next() behind it, and resets.
  __device__ static void finish(const TileSchedulerParams& s) {
    __threadfence();
    if (atomicAdd(&s.counters[1], 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(&s.counters[0], 0);
      atomicExch(&s.counters[1], 0);
    }
  }
  __device__ static ForwardTile tile(const TileSchedulerParams& s, int idx) {
    const int section_tiles = s.section * s.m_blocks;
    const int section = idx / section_tiles, first_bh = section * s.section;
    const int width = min(s.section, s.bh - first_bh);  // the last section may be narrower
    const int r = idx - section * section_tiles;
    const int m = r / width, bh = first_bh + r % width;
    return {kIsCausal ? s.m_blocks - 1 - m : m, bh / s.heads, bh % s.heads};
  }
};

}  // namespace cute_ops::flash
