#pragma once
// Tile configuration of the FlashAttention-2 forward kernel: tile sizes, MMA, shared-memory
// layouts and copy atoms for one (head dim, tile, warps, element type). The per-head-dim choice
// of tiles lives in flash_fwd_launch.h.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "common/cute/sm80_mma.h"
#include "common/cute/sm80_smem.h"

namespace cute_ops::flash {

using namespace cute;

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
  using TiledMma =
      TiledMMA<sm80::MmaAtom<Element>, Layout<Shape<Int<kNWarps>, _1, _1>>, Tile<Int<16 * kNWarps>, _16, _16>>;

  static constexpr int kBlockKSmem = sm80::SwizzledRows<kHeadDim>::kBlockKSmem;
  using SmemLayoutAtom = typename sm80::SwizzledRows<kHeadDim>::Atom;
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // V^T for the second GEMM is a view of V's buffer, read with the transposing ldmatrix.
  using SmemLayoutVt =
      decltype(composition(SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutVtNoSwizzle = decltype(get_nonswizzle_portion(SmemLayoutVt{}));
  using SmemLayoutO = SmemLayoutQ;

  using SmemCopyAtom = sm80::LdsmAtom<Element>;
  using SmemCopyAtomTransposed = sm80::LdsmTransposedAtom<Element>;
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
