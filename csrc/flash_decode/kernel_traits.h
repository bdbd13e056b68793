#pragma once
// Tile configuration of the split-KV decode kernel. A CTA takes kBlockM packed query rows (the
// query heads of one kv head, times the new tokens) and walks its split of the keys kBlockN at a
// time through a kStages-deep cp.async ring; each of the kNWarps warps owns 16 keys of every
// tile (its "slab"), so the few query rows are never split across warps and every K/V byte is
// read from shared memory once.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace cute_ops::decode {

using namespace cute;

template <int kHeadDim_, int kBlockM_, int kNWarps_, int kStages_, typename Element_>
struct FlashDecodeTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kWarpKeys = 16;
  static constexpr int kBlockN = kWarpKeys * kNWarps;
  static constexpr int kStages = kStages_;

  using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                     MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                     MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
  // One warp per MMA: warps work on different keys, not different rows.
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<_1, _1, _1>>, Tile<_16, _16, _16>>;

  static constexpr int kBlockKSmem = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzle = kBlockKSmem == 32 ? 2 : 3;
  using SmemLayoutAtom = decltype(composition(
      Swizzle<kSwizzle, 3, 3>{}, Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  // One warp's 16 keys. A slab is a whole number of swizzle periods (8 x 64 elements), so slabs
  // placed back to back share the same swizzle pattern.
  using SmemLayoutSlab = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kWarpKeys>, Int<kHeadDim>>{}));
  using SmemLayoutSlabT =
      decltype(composition(SmemLayoutSlab{}, make_layout(Shape<Int<kHeadDim>, Int<kWarpKeys>>{}, GenRowMajor{})));
  using SmemLayoutSlabTNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutSlabT{}));
  static constexpr int kSlabElems = kWarpKeys * kHeadDim;
  static_assert(kSlabElems % (8 * kBlockKSmem) == 0);

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;

  // Shared memory: Q, then kStages x (K tile, V tile), each tile kNWarps slabs. After the
  // mainloop the ring is reused for the warps' float32 partial outputs.
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kRingElems = kStages * 2 * kNWarps * kSlabElems;
  static constexpr int kCombineBytes = kNWarps * kBlockM * (kHeadDim + 1) * 4;
  static constexpr int kSmemBytes = static_cast<int>(
      kQElems * sizeof(Element) +
      (kRingElems * sizeof(Element) > kCombineBytes ? kRingElems * sizeof(Element) : kCombineBytes));

  static constexpr int kElemsPerChunk = 16 / sizeof(Element);
  static constexpr int kChunksPerRow = kHeadDim / kElemsPerChunk;
  static_assert(kNThreads % kChunksPerRow == 0);
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;
  static_assert(kBlockN % kRowsPerPass == 0 && kBlockM % kRowsPerPass == 0);
};

}  // namespace cute_ops::decode
