#pragma once
// Tile configuration of the FlashAttention-2 forward kernel: tile sizes, MMA, shared-memory
// layouts and copy atoms for one (head dim, tile, warps, element type). The per-head-dim choice
// of tiles lives in flash_fwd_launch.h.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace cute_ops::flash {

using namespace cute;

// The pieces every attention kernel here shares (flash_decode's traits use them too).
// The SM80 m16n8k16 MMA with float32 accumulation for a 16-bit element type.
template <typename Element>
using Sm80MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                       MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                       MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;

// Shared memory rows of 64 (or 32) 16-bit elements, XOR-swizzled so that ldmatrix reads of 8 rows
// x 16 bytes hit 8 different bank groups; tiles are built from this 8-row atom.
template <int kHeadDim>
struct SwizzledRows {
  static constexpr int kBlockKSmem = kHeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzle = kBlockKSmem == 32 ? 2 : 3;
  using Atom = decltype(composition(Swizzle<kSwizzle, 3, 3>{},
                                    Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
};

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, typename Element_>
struct FlashFwdTraits {
  using Element = Element_;  // cutlass::half_t or cutlass::bfloat16_t
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;

  // Warps split the M dimension: each warp owns 16 rows of every 16*kNWarps and reads only its own
  // rows of Q (and later writes only its own rows of O), which is why O may reuse Q's buffer.
  using TiledMma = TiledMMA<Sm80MmaAtom<Element>, Layout<Shape<Int<kNWarps>, _1, _1>>, Tile<Int<16 * kNWarps>, _16, _16>>;

  static constexpr int kBlockKSmem = SwizzledRows<kHeadDim>::kBlockKSmem;
  using SmemLayoutAtom = typename SwizzledRows<kHeadDim>::Atom;
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V^T for the second GEMM is a view of V's buffer, read with the transposing ldmatrix.
  using SmemLayoutVt =
      decltype(composition(SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutVtNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutVt{}));
  using SmemLayoutO = SmemLayoutQ;

  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
  using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
  using SmemCopyAtomO = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>;

  static constexpr int kSmemBytes =
      static_cast<int>((cosize(SmemLayoutQ{}) + 2 * cosize(SmemLayoutKV{})) * sizeof(Element));

  // Global <-> shared: 16 bytes a thread, consecutive threads along a row.
  static constexpr int kGmemElemsPerLoad = 16 / sizeof(Element);
  static constexpr int kGmemThreadsPerRow = kBlockKSmem / kGmemElemsPerLoad;
  static_assert(kNThreads % kGmemThreadsPerRow == 0);
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                Stride<Int<kGmemThreadsPerRow>, _1>>;
  using GmemTiledCopyQKV = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{},
                                                    GmemLayoutAtom{}, Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
  using GmemTiledCopyO = decltype(make_tiled_copy(Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<128>, Element>{},
                                                  GmemLayoutAtom{}, Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
};

}  // namespace cute_ops::flash
