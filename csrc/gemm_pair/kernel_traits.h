#pragma once
// Tile configuration of the gemm_pair kernel: tile sizes, pipeline depth, warps, MMA, shared-memory
// layouts and copy atoms for one (block_m, element type). Both GEMMs of a launch share it. The
// choice of config per M lives in gemm_pair_launch.h.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <type_traits>

#include "common/cute/sm80_copy.h"
#include "common/cute/sm80_mma.h"
#include "common/cute/sm80_smem.h"
#include "gemm_pair/gemm_pair.h"

namespace cute_ops::gemm_pair {

using namespace cute;

template <int kBlockM_, int kBlockK_, int kStages_, int kWarpsM_, int kWarpsN_, typename Element_,
          int kL2Prefetch = 128>
struct GemmPairTraits {
  using Element = Element_;  // cutlass::half_t or cutlass::bfloat16_t
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kGemmPairBlockN;  // fixed: pack_gate_up's layout depends on it
  static constexpr int kBlockK = kBlockK_;
  static constexpr int kStages = kStages_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_;
  static constexpr int kNThreads = 32 * kWarpsM * kWarpsN;
  static_assert(kBlockK % 64 == 0, "the swizzle below is for 64-element (128-byte) shared-memory rows");

  using MmaAtom = sm80::MmaAtom<Element>;
  // Each warp covers 16 rows x 16 columns an MMA step (two n8 atoms side by side), the shape one
  // ldmatrix.x4 feeds for B.
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>,
                            Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>>;
  static_assert(kBlockM % (16 * kWarpsM) == 0 && kBlockN % (16 * kWarpsN) == 0);

  // 128-byte rows XOR-swizzled so that ldmatrix's 8 rows x 16 bytes hit 8 different bank groups.
  using SmemLayoutAtom = typename sm80::SwizzledRows<64>::Atom;
  using SmemLayoutA = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kBlockK>, Int<kStages>>{}));
  using SmemLayoutB = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kBlockK>, Int<kStages>>{}));
  using SmemCopyAtom = sm80::LdsmAtom<Element>;

  // The epilogue stages the float32 tile through shared memory (reusing the pipeline's buffers),
  // so that the activation can pair columns that sit in different threads' accumulators and
  // every global store is 16 bytes. Rows padded by 4 floats against bank conflicts.
  static constexpr int kEpilogueLd = kBlockN + 4;
  using SmemLayoutC = Layout<Shape<Int<kBlockM>, Int<kBlockN>>, Stride<Int<kEpilogueLd>, _1>>;

  static constexpr int kPipelineBytes =
      static_cast<int>((cosize(SmemLayoutA{}) + cosize(SmemLayoutB{})) * sizeof(Element));
  static constexpr int kEpilogueBytes = kBlockM * kEpilogueLd * 4;
  static constexpr int kSmemBytes = std::max(kPipelineBytes, kEpilogueBytes);

  // Global -> shared: 16 bytes a thread, consecutive threads along a row, cp.async.cg (L2 only: h
  // is written by other CTAs during the launch) with an L2 prefetch of kL2Prefetch bytes: a weight
  // row is read 128 bytes (one 64-element K tile) at a time, and prefetching 256 makes every other
  // K tile an L2 hit.
  static constexpr int kElemsPerLoad = 16 / sizeof(Element);
  static constexpr int kThreadsPerRow = kBlockK / kElemsPerLoad;
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kThreadsPerRow>, Int<kThreadsPerRow>>,
                                Stride<Int<kThreadsPerRow>, _1>>;
  using GmemTiledCopy = decltype(make_tiled_copy(Copy_Atom<sm80::CpAsyncCg<kL2Prefetch>, Element>{},
                                                 GmemLayoutAtom{}, Layout<Shape<_1, Int<kElemsPerLoad>>>{}));
  static_assert(kBlockM % (kNThreads / kThreadsPerRow) == 0, "a load pass must not straddle the A tile's end");
};

}  // namespace cute_ops::gemm_pair
