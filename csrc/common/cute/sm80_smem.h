#pragma once
// Shared-memory layouts for the SM80 path: rows of 16-bit elements XOR-swizzled for ldmatrix.
#include <cute/tensor.hpp>

namespace cute_ops::sm80 {

using namespace cute;

// Rows of 64 (or, for a width that is not a multiple of 64, 32) 16-bit elements, XOR-swizzled so
// that an ldmatrix read of 8 rows x 16 bytes hits 8 different bank groups; tiles are built from
// this 8-row atom with tile_to_shape. kWidth: the tile's row length (head dim, K tile).
template <int kWidth>
struct SwizzledRows {
  static constexpr int kBlockKSmem = kWidth % 64 == 0 ? 64 : 32;
  static constexpr int kSwizzle = kBlockKSmem == 32 ? 2 : 3;
  using Atom = decltype(composition(Swizzle<kSwizzle, 3, 3>{},
                                    Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
};

// ldmatrix: plain for operands read K-major, transposing for an operand stored the other way (V).
template <typename Element>
using LdsmAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
template <typename Element>
using LdsmTransposedAtom = Copy_Atom<SM75_U16x8_LDSM_T, Element>;

}  // namespace cute_ops::sm80
