#pragma once
// SM90 warpgroup MMA (wgmma) as the CuTe families here use it: one warpgroup-wide product over a
// whole tile's K, and views of its accumulator fragment that match the SM80 ones in sm80_mma.h
// (rows x columns for row reductions; the accumulator as the A operand of the next wgmma).
//
// A wgmma is asynchronous: gemm() issues the k-slices as one batch (warpgroup_arrive, the MMAs,
// warpgroup_commit_batch) and, unless told otherwise, waits for it. warpgroup_fence_operand keeps
// the compiler from moving register reads or writes of the accumulator (and of a register A
// operand) across the asynchronous MMAs.
#include <cute/tensor.hpp>

namespace cute_ops::sm90 {

using namespace cute;

// acc (+)= A B^T over every k-slice of the fragments. kZeroInit: the first slice overwrites acc
// instead of adding (no clear needed). kWait: warpgroup_wait<kWait>() after the commit, i.e. at
// most kWait batches left in flight; -1 returns with this batch in flight (the caller waits).
template <bool kZeroInit, int kWait, typename TiledMma, typename FragA, typename FragB, typename FragC>
__device__ __forceinline__ void gemm(TiledMma& tiled_mma, const FragA& tCrA, const FragB& tCrB, FragC& tCrC) {
  // A in registers (RS) rather than a shared-memory descriptor (SS).
  constexpr bool kRegisterA = !is_base_of<GMMA::DescriptorIterator, typename TiledMma::FrgTypeA>::value;
  if constexpr (kRegisterA) warpgroup_fence_operand(const_cast<FragA&>(tCrA));
  warpgroup_fence_operand(tCrC);
  warpgroup_arrive();
  if constexpr (kZeroInit) tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(tCrA); ++k) {
    cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), tCrC);
    tiled_mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(tCrC);
  if constexpr (kRegisterA) warpgroup_fence_operand(const_cast<FragA&>(tCrA));
}

// warpgroup_wait<kPending>(): at most kPending of this warp group's committed wgmma batches left
// in flight; then `frags` (the completed batches' accumulators, a register A operand about to be
// rewritten) fenced, so that the compiler moves none of their reads or writes above the wait.
template <int kPending, typename... Frags>
__device__ __forceinline__ void wait(Frags&... frags) {
  warpgroup_wait<kPending>();
  (warpgroup_fence_operand(frags), ...);
}

// wait<kPending>(frags...), held back until `dep` is computed. ptxas schedules a
// wgmma.wait_group as early as nothing stops it, which for a softmax meant to run while a wgmma is
// in flight put the wait before the exponentials (seen in the SASS). Here the wait sits in both
// arms of a branch on a warp-uniform vote over `dep` (a value the work to overlap produces), so
// it always runs, once, and cannot start before `dep` exists. (The same wait under a predicate
// instead of a branch made ptxas serialise every wgmma of the kernel: a WARPGROUP.DEPBAR after
// each HGMMA.) The vote keeps the branch uniform: wgmma.wait_group is .aligned.
template <int kPending, typename... Frags>
__device__ __forceinline__ void wait_after(uint32_t dep, Frags&... frags) {
  if (__all_sync(0xffffffffu, dep != 0x7fc00001u)) {
    warpgroup_wait<kPending>();
  } else {
    warpgroup_wait<kPending>();
  }
  (warpgroup_fence_operand(frags), ...);
}

// ((2, 2, N / 8), MMA_M, MMA_N) wgmma accumulator layout -> ((2, MMA_M), (2, N / 8, MMA_N)): rows x
// columns of this thread's elements. As for mma.sync, a thread holds two rows (8 apart) of each
// 64-row slice and a row is shared by the 4 threads of a quad (sm80::quad_max / quad_sum apply).
template <typename Layout>
__device__ __forceinline__ auto acc_rowcol(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3 && decltype(rank<0>(acc))::value == 3);
  static_assert(decltype(size<0, 0>(acc))::value == 2 && decltype(size<0, 1>(acc))::value == 2);
  return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)), make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));
}

// The same accumulator (16-bit after conversion) as the register A operand of the next wgmma,
// whose k-slices are 16 wide: ((2, 2, N / 8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, (N / 16, MMA_N)).
// Two adjacent 8-column groups of the accumulator are one k-slice's fragment.
template <typename Layout>
__device__ __forceinline__ auto acc_as_a_operand(Layout acc) {
  static_assert(decltype(rank(acc))::value == 3 && decltype(rank<0>(acc))::value == 3);
  static_assert(decltype(size<0, 0>(acc))::value == 2 && decltype(size<0, 1>(acc))::value == 2);
  auto cols = logical_divide(get<0, 2>(acc), Tile<_2>{});  // ((2, N / 16))
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(cols)), get<1>(acc),
                     coalesce(make_layout(get<0, 1>(cols), get<2>(acc))));
}

}  // namespace cute_ops::sm90
