#pragma once
// Tile configuration of the split-KV decode kernel. A CTA takes kBlockM packed query rows (the
// query heads of one kv head, times the new tokens) and walks its split of the keys kBlockN at a
// time through a kStages-deep cp.async ring; each of the kNWarps warps owns 16 keys of every
// tile (its "slab"), which it alone loads and reads, so the few query rows are never split across
// warps, every K/V byte is read from shared memory once, and the ring needs no CTA barrier.
#include <cute/tensor.hpp>

#include "common/cute/sm80_mma.h"
#include "common/cute/sm80_smem.h"
#include "flash_decode/flash_decode.h"
#include "flash_decode/fp8_cache.h"
#include "flash_decode/new_tokens.h"

namespace cute_ops::decode {

using namespace cute;

// Element: q's, the outputs' and k_new's dtype; CacheElement: the cache's, Element or e4m3
// (fp8_cache.h: head dim 128 only).
template <int kHeadDim_, int kStages_, typename Element_, typename CacheElement_ = Element_>
struct FlashDecodeTraits {
  using Element = Element_;
  using CacheElement = CacheElement_;
  static constexpr bool kFp8 = sizeof(CacheElement) == 1;
  static_assert(!kFp8 || kHeadDim_ == fp8::kHeadDim);
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kDecodeBlockM;
  // A warp's keys a tile: 16, or 32 over an fp8 cache, whose slab of 16 keys is half the bytes and
  // twice the instructions a byte (fp8_cache.h): 32 spread the per-tile work (the wait, the
  // softmax's shuffles and rescale) over the 16-bit slab's bytes.
  static constexpr int kWarpKeys = kFp8 ? 32 : 16;
  static constexpr int kNWarps = 4;
  static constexpr int kBlockN = kNWarps * kWarpKeys;
  // The host's split heuristic counts tiles of kDecodeBlockN keys.
  static_assert(kFp8 || kBlockN == kDecodeBlockN);
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kStages = kStages_;

  // One warp per MMA: warps work on different keys, not different rows.
  using TiledMma = TiledMMA<sm80::MmaAtom<Element>, Layout<Shape<_1, _1, _1>>, Tile<_16, _16, _16>>;

  static constexpr int kBlockKSmem = sm80::SwizzledRows<kHeadDim>::kBlockKSmem;
  using SmemLayoutAtom = typename sm80::SwizzledRows<kHeadDim>::Atom;
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  // One warp's 16 keys. A slab is a whole number of swizzle periods (8 x 64 elements), so slabs
  // placed back to back share the same swizzle pattern.
  using SmemLayoutSlab = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kWarpKeys>, Int<kHeadDim>>{}));
  using SmemLayoutSlabT =
      decltype(composition(SmemLayoutSlab{}, make_layout(Shape<Int<kHeadDim>, Int<kWarpKeys>>{}, GenRowMajor{})));
  using SmemLayoutSlabTNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutSlabT{}));
  static constexpr int kSlabElems = kWarpKeys * kHeadDim;
  static_assert(kSlabElems % (8 * kBlockKSmem) == 0);
  static constexpr int kSlabBytes = kSlabElems * static_cast<int>(sizeof(CacheElement));

  using SmemCopyAtom = sm80::LdsmAtom<Element>;
  using SmemCopyAtomTransposed = sm80::LdsmTransposedAtom<Element>;

  // Shared memory: Q, then kStages x (K tile, V tile), each tile kNWarps slabs. After the
  // mainloop the ring is reused for the warps' float32 partial outputs.
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kRingBytes = kStages * 2 * kNWarps * kSlabBytes;
  // Row pitch (floats) of the warps' partial O in the merge: float4 aligned, rows 4 banks apart.
  static constexpr int kWarpMergeLd = kHeadDim + 4;
  static constexpr int kWarpMergeBytes = kNWarps * kBlockM * kWarpMergeLd * 4;
  static_assert(kQElems * sizeof(Element) >= (2 * kNWarps + 1) * kBlockM * 4, "merge weights live where Q was");
  // Then this step's new tokens (new_tokens.h), apart from the ring: they are staged before the
  // first tile and read at the tile that holds them.
  static constexpr int kNewTokensOffset = static_cast<int>(
      kQElems * sizeof(Element) + (kRingBytes > kWarpMergeBytes ? kRingBytes : kWarpMergeBytes));
  static constexpr int kSmemBytes = kNewTokensOffset;  // a call without new tokens
  static constexpr int kSmemBytesNewTokens =
      kNewTokensOffset + NewTokens<Element, kHeadDim, kNThreads, CacheElement>::kSmemBytes;

  static constexpr int kElemsPerChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kElemsPerChunk;
  static_assert(kNThreads % kChunksPerRow == 0);
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;  // Q rows a CTA-wide copy covers
  static_assert(kBlockM % kRowsPerPass == 0);
  // The cache's rows, copied 16 bytes a lane.
  static constexpr int kCacheElemsPerChunk = 16 / static_cast<int>(sizeof(CacheElement));
  static constexpr int kCacheChunksPerRow = kHeadDim / kCacheElemsPerChunk;
  static_assert(32 % kCacheChunksPerRow == 0, "a warp-wide copy covers whole key rows");
  static constexpr int kSlabRowsPerPass = 32 / kCacheChunksPerRow;  // key rows a warp-wide copy covers
  static_assert(16 % kSlabRowsPerPass == 0, "a pass's rows are in one 16-key group");

  // Byte offset in a slab of the 16-byte chunk of row `row` that starts at element `col`.
  static __device__ __forceinline__ int slab_offset(int row, int col) {
    if constexpr (kFp8) {
      return fp8::slab_offset(row, col / kCacheElemsPerChunk);
    } else {
      return SmemLayoutSlab{}(row, col) * static_cast<int>(sizeof(Element));
    }
  }
};

}  // namespace cute_ops::decode
