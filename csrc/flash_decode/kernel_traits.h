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
#include "flash_decode/new_tokens.h"

namespace cute_ops::decode {

using namespace cute;

template <int kHeadDim_, int kStages_, typename Element_>
struct FlashDecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kDecodeBlockM;
  static constexpr int kBlockN = kDecodeBlockN;  // the host's split heuristic counts tiles of this size
  static constexpr int kWarpKeys = 16;
  static constexpr int kNWarps = kBlockN / kWarpKeys;
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

  using SmemCopyAtom = sm80::LdsmAtom<Element>;
  using SmemCopyAtomTransposed = sm80::LdsmTransposedAtom<Element>;

  // Shared memory: Q, then kStages x (K tile, V tile), each tile kNWarps slabs. After the
  // mainloop the ring is reused for the warps' float32 partial outputs.
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kRingElems = kStages * 2 * kNWarps * kSlabElems;
  // Row pitch (floats) of the warps' partial O in the merge: float4 aligned, rows 4 banks apart.
  static constexpr int kWarpMergeLd = kHeadDim + 4;
  static constexpr int kWarpMergeBytes = kNWarps * kBlockM * kWarpMergeLd * 4;
  static_assert(kQElems * sizeof(Element) >= (2 * kNWarps + 1) * kBlockM * 4, "merge weights live where Q was");
  // Then this step's new tokens (new_tokens.h), apart from the ring: they are staged before the
  // first tile and read at the tile that holds them.
  static constexpr int kNewTokensOffset = static_cast<int>(
      kQElems * sizeof(Element) +
      (kRingElems * sizeof(Element) > kWarpMergeBytes ? kRingElems * sizeof(Element) : kWarpMergeBytes));
  static constexpr int kSmemBytes = kNewTokensOffset;  // a call without new tokens
  static constexpr int kSmemBytesNewTokens = kNewTokensOffset + NewTokens<Element, kHeadDim, kNThreads>::kSmemBytes;

  static constexpr int kElemsPerChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kElemsPerChunk;
  static_assert(kNThreads % kChunksPerRow == 0);
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;  // Q rows a CTA-wide copy covers
  static_assert(kBlockM % kRowsPerPass == 0);
  static_assert(32 % kChunksPerRow == 0, "a warp-wide copy covers whole key rows");
  static constexpr int kSlabRowsPerPass = 32 / kChunksPerRow;  // key rows a warp-wide copy covers
  static_assert(kWarpKeys % kSlabRowsPerPass == 0);
};

}  // namespace cute_ops::decode
