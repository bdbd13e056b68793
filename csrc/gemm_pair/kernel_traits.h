#pragma once
// Tile configuration of the gemm_pair kernel: tile sizes, pipeline depth, warps, MMA, shared-memory
// layouts and copy atoms for one (block_m, element type). Both GEMMs of a launch share it. The
// choice of config per M lives in gemm_pair_launch.h.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <algorithm>
#include <type_traits>

#include "flash_fwd/kernel_traits.h"  // Sm80MmaAtom, SwizzledRows: the attention kernels' MMA and smem rows
#include "gemm_pair/gemm_pair.h"

namespace cute_ops::gemm_pair {

// cp.async.cg (L2 only: h is written by other CTAs during the launch, so L1 must never serve it)
// with an L2 prefetch of kPrefetch bytes around each 16-byte chunk. A weight row is read 128 bytes
// (one 64-element K tile) at a time; prefetching 256 makes every other K tile an L2 hit and
// doubles the run of a DRAM page read at once.
template <int kPrefetch>
struct CpAsyncCg {
  using SRegisters = cute::uint128_t[1];
  using DRegisters = cute::uint128_t[1];
  CUTE_HOST_DEVICE static void copy(cute::uint128_t const& gmem_src, cute::uint128_t& smem_dst) {
#if defined(CUTE_ARCH_CP_ASYNC_SM80_ENABLED)
    const uint32_t smem = cute::cast_smem_ptr_to_uint(&smem_dst);
    if constexpr (kPrefetch == 256) {
      asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem), "l"(&gmem_src));
    } else {
      asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(&gmem_src));
    }
#endif
  }
};

}  // namespace cute_ops::gemm_pair

namespace cute {
template <int kPrefetch>
struct Copy_Traits<cute_ops::gemm_pair::CpAsyncCg<kPrefetch>> {
  using ThrID = Layout<_1>;
  using SrcLayout = Layout<Shape<_1, _128>>;  // one 128-bit chunk
  using DstLayout = Layout<Shape<_1, _128>>;
  using RefLayout = SrcLayout;
};
}  // namespace cute

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

  using MmaAtom = flash::Sm80MmaAtom<Element>;
  // Each warp covers 16 rows x 16 columns an MMA step (two n8 atoms side by side), the shape one
  // ldmatrix.x4 feeds for B.
  using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>,
                            Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>>;
  static_assert(kBlockM % (16 * kWarpsM) == 0 && kBlockN % (16 * kWarpsN) == 0);

  // 128-byte rows XOR-swizzled so that ldmatrix's 8 rows x 16 bytes hit 8 different bank groups.
  using SmemLayoutAtom = typename flash::SwizzledRows<64>::Atom;
  using SmemLayoutA = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kBlockK>, Int<kStages>>{}));
  using SmemLayoutB = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kBlockK>, Int<kStages>>{}));
  using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;

  // The epilogue stages the float32 tile through shared memory (reusing the pipeline's buffers),
  // so that the activation can pair columns that sit in different threads' accumulators and
  // every global store is 16 bytes. Rows padded by 4 floats against bank conflicts.
  static constexpr int kEpilogueLd = kBlockN + 4;
  using SmemLayoutC = Layout<Shape<Int<kBlockM>, Int<kBlockN>>, Stride<Int<kEpilogueLd>, _1>>;

  static constexpr int kPipelineBytes =
      static_cast<int>((cosize(SmemLayoutA{}) + cosize(SmemLayoutB{})) * sizeof(Element));
  static constexpr int kEpilogueBytes = kBlockM * kEpilogueLd * 4;
  static constexpr int kSmemBytes = std::max(kPipelineBytes, kEpilogueBytes);

  // Global -> shared: 16 bytes a thread, consecutive threads along a row, cp.async.cg.
  static constexpr int kElemsPerLoad = 16 / sizeof(Element);
  static constexpr int kThreadsPerRow = kBlockK / kElemsPerLoad;
  using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kThreadsPerRow>, Int<kThreadsPerRow>>,
                                Stride<Int<kThreadsPerRow>, _1>>;
  using GmemTiledCopy = decltype(make_tiled_copy(Copy_Atom<CpAsyncCg<kL2Prefetch>, Element>{},
                                                 GmemLayoutAtom{}, Layout<Shape<_1, Int<kElemsPerLoad>>>{}));
  static_assert(kBlockM % (kNThreads / kThreadsPerRow) == 0, "a load pass must not straddle the A tile's end");
};

}  // namespace cute_ops::gemm_pair
