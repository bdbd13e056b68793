#pragma once
// The SM80 mainloop of gemm_pair, shared by both GEMMs: acc += A B^T over one K range, with A
// [rows_a, k_len] and B [rows_b, k_len] both K-major (nn.Linear weights are), a kStages-deep
// cp.async ring in swizzled shared memory and mma.sync from ldmatrix fragments. The type is its
// tile config (what the mainloop needs of it: tile sizes, pipeline depth, warps, MMA, layouts,
// copy atoms) and owns its shared memory (SharedStorage); the choice of config per M lives in
// gemm_pair_launch.h.
//
// A consumer tile's B operand (weights) does not depend on the other GEMM, so the prologue issues
// B's first stages before `wait_for_a` (the dependency wait) and A's after it: a GEMM1 tile
// streams its weights while GEMM0 finishes the h columns it needs.
//
// Partition names: tXgY / tXsY / tXrY are thread partitions of global / shared / register Y (X = A,
// B for the copies, C for the MMA); tXcY are identity (coordinate) partitions used to predicate.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "common/cute/sm80_copy.h"
#include "common/cute/sm80_gemm.h"
#include "common/cute/sm80_mma.h"
#include "common/cute/sm80_smem.h"

namespace cute_ops::gemm_pair {

using namespace cute;

// kL2Prefetch: the L2 prefetch (bytes) of each global load (sm80::CpAsyncCg says why 256).
template <typename Element_, int kBlockM_, int kBlockN_, int kBlockK_, int kStages_, int kWarpsM_, int kWarpsN_,
          int kL2Prefetch = 128>
struct MainloopSm80 {
  using Element = Element_;  // cutlass::half_t or cutlass::bfloat16_t
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kBlockK = kBlockK_;
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

  // The ring: kStages (A, B) tile pairs. Free again once operator() returns (its last barrier).
  struct SharedStorage {
    array_aligned<Element, cosize_v<SmemLayoutA>> smem_a;
    array_aligned<Element, cosize_v<SmemLayoutB>> smem_b;
  };

  // A zeroed accumulator tile [kBlockM, kBlockN], partitioned like TiledMma's C.
  __device__ __forceinline__ static auto make_accumulators() {
    TiledMma tiled_mma;
    Tensor acc = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
    clear(acc);
    return acc;
  }

  // acc += a[0:rows_a, 0:k_len] b[0:rows_b, 0:k_len]^T (rows past rows_a / rows_b and columns past
  // k_len read as zeros). Every thread of the CTA calls it; wait_for_a() is called by every thread
  // once B's first stages are issued and before any load of A.
  template <typename Acc, typename WaitForA>
  __device__ __forceinline__ void operator()(Acc& acc, const Element* a, int64_t lda, int rows_a, const Element* b,
                                             int64_t ldb, int rows_b, int k_len, SharedStorage& storage,
                                             WaitForA&& wait_for_a) const {
    const int tid = threadIdx.x;
    const int k_tiles = (k_len + kBlockK - 1) / kBlockK;

    Tensor mA = make_tensor(make_gmem_ptr(a), make_shape(Int<kBlockM>{}, k_len), make_stride(lda, _1{}));
    Tensor mB = make_tensor(make_gmem_ptr(b), make_shape(Int<kBlockN>{}, k_len), make_stride(ldb, _1{}));
    Tensor gA = local_tile(mA, Shape<Int<kBlockM>, Int<kBlockK>>{}, make_coord(0, _));  // (BM, BK, k_tiles)
    Tensor gB = local_tile(mB, Shape<Int<kBlockN>, Int<kBlockK>>{}, make_coord(0, _));  // (BN, BK, k_tiles)
    Tensor sA = make_tensor(make_smem_ptr(storage.smem_a.data()), SmemLayoutA{});        // (BM, BK, stages)
    Tensor sB = make_tensor(make_smem_ptr(storage.smem_b.data()), SmemLayoutB{});        // (BN, BK, stages)

    GmemTiledCopy gmem_copy;
    auto gmem_thr_copy = gmem_copy.get_thread_slice(tid);
    Tensor tAgA = gmem_thr_copy.partition_S(gA);  // (CPY, CPY_M, CPY_K, k_tiles)
    Tensor tAsA = gmem_thr_copy.partition_D(sA);  // (CPY, CPY_M, CPY_K, stages)
    Tensor tBgB = gmem_thr_copy.partition_S(gB);
    Tensor tBsB = gmem_thr_copy.partition_D(sB);
    Tensor tAcA = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockK>>{}));
    Tensor tBcB = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockK>>{}));

    TiledMma tiled_mma;
    auto thr_mma = tiled_mma.get_thread_slice(tid);
    Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
    Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
    auto smem_copy_a = make_tiled_copy_A(SmemCopyAtom{}, tiled_mma);
    auto smem_thr_copy_a = smem_copy_a.get_thread_slice(tid);
    Tensor tCsA = smem_thr_copy_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, stages)
    auto smem_copy_b = make_tiled_copy_B(SmemCopyAtom{}, tiled_mma);
    auto smem_thr_copy_b = smem_copy_b.get_thread_slice(tid);
    Tensor tCsB = smem_thr_copy_b.partition_S(sB);

    auto load_a = [&](int kt) {
      sm80::copy_predicated</*kCheckCols=*/true>(gmem_copy, tAgA(_, _, _, kt), tAsA(_, _, _, kt % kStages), tAcA,
                                                 rows_a, k_len - kt * kBlockK);
    };
    auto load_b = [&](int kt) {
      sm80::copy_predicated</*kCheckCols=*/true>(gmem_copy, tBgB(_, _, _, kt), tBsB(_, _, _, kt % kStages), tBcB,
                                                 rows_b, k_len - kt * kBlockK);
    };

    // Prologue: stages 0 .. kStages-2. Group 0 holds every B stage issued before the wait and A_0,
    // so waiting for group kt still means "A_kt and B_kt have landed".
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < k_tiles) load_b(s);
    }
    wait_for_a();
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < k_tiles) load_a(s);
      cp_async_fence();
    }

#pragma unroll 1
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<kStages - 2>();
      __syncthreads();  // tile kt has landed for every thread; every warp is done with tile kt-1's stage
      const int next = kt + kStages - 1;
      if (next < k_tiles) {
        load_a(next);
        load_b(next);
      }
      cp_async_fence();

      const int stage = kt % kStages;
      sm80::gemm_ss(acc, tCrA, tCrB, tCsA(_, _, _, stage), tCsB(_, _, _, stage), tiled_mma, smem_copy_a, smem_copy_b,
                    smem_thr_copy_a, smem_thr_copy_b);
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring's shared memory is free for the epilogue
  }
};

}  // namespace cute_ops::gemm_pair
