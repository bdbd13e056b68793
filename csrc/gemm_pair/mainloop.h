#pragma once
// The SM80 mainloop shared by both GEMMs of gemm_pair: acc += A B^T over one K range, with A
// [rows_a, k_len] and B [rows_b, k_len] both K-major (nn.Linear weights are), a kStages-deep
// cp.async ring in swizzled shared memory and mma.sync from ldmatrix fragments.
//
// A consumer tile's B operand (weights) does not depend on the other GEMM, so the prologue issues
// B's first stages before `wait_for_a` (the dependency wait) and A's after it: a GEMM1 tile
// streams its weights while GEMM0 finishes the h columns it needs.
//
// Partition names: tXgY / tXsY / tXrY are thread partitions of global / shared / register Y (X = A,
// B for the copies, C for the MMA); tXcY are identity (coordinate) partitions used to predicate.
#include <cute/tensor.hpp>

#include "common/cute/sm80_copy.h"
#include "common/cute/sm80_gemm.h"
#include "gemm_pair/kernel_traits.h"

namespace cute_ops::gemm_pair {

using namespace cute;

template <typename Traits, typename Acc, typename WaitForA>
__device__ __forceinline__ void mainloop(Acc& acc, const typename Traits::Element* a, int64_t lda, int rows_a,
                                         const typename Traits::Element* b, int64_t ldb, int rows_b, int k_len,
                                         char* smem, WaitForA&& wait_for_a) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kBlockK = Traits::kBlockK;
  constexpr int kStages = Traits::kStages;
  const int tid = threadIdx.x;
  const int k_tiles = (k_len + kBlockK - 1) / kBlockK;

  Tensor mA = make_tensor(make_gmem_ptr(a), make_shape(Int<kBlockM>{}, k_len), make_stride(lda, _1{}));
  Tensor mB = make_tensor(make_gmem_ptr(b), make_shape(Int<kBlockN>{}, k_len), make_stride(ldb, _1{}));
  Tensor gA = local_tile(mA, Shape<Int<kBlockM>, Int<kBlockK>>{}, make_coord(0, _));  // (BM, BK, k_tiles)
  Tensor gB = local_tile(mB, Shape<Int<kBlockN>, Int<kBlockK>>{}, make_coord(0, _));  // (BN, BK, k_tiles)
  Tensor sA = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutA{});
  Tensor sB = make_tensor(sA.data() + cosize(typename Traits::SmemLayoutA{}), typename Traits::SmemLayoutB{});

  typename Traits::GmemTiledCopy gmem_copy;
  auto gmem_thr_copy = gmem_copy.get_thread_slice(tid);
  Tensor tAgA = gmem_thr_copy.partition_S(gA);  // (CPY, CPY_M, CPY_K, k_tiles)
  Tensor tAsA = gmem_thr_copy.partition_D(sA);  // (CPY, CPY_M, CPY_K, stages)
  Tensor tBgB = gmem_thr_copy.partition_S(gB);
  Tensor tBsB = gmem_thr_copy.partition_D(sB);
  Tensor tAcA = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockK>>{}));
  Tensor tBcB = gmem_thr_copy.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockK>>{}));

  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  auto smem_copy_a = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_a = smem_copy_a.get_thread_slice(tid);
  Tensor tCsA = smem_thr_copy_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, stages)
  auto smem_copy_b = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_b = smem_copy_b.get_thread_slice(tid);
  Tensor tCsB = smem_thr_copy_b.partition_S(sB);

  auto load_a = [&](int kt) {
    sm80::copy_predicated</*kCheckCols=*/true>(gmem_copy, tAgA(_, _, _, kt), tAsA(_, _, _, kt % kStages), tAcA, rows_a,
                                               k_len - kt * kBlockK);
  };
  auto load_b = [&](int kt) {
    sm80::copy_predicated</*kCheckCols=*/true>(gmem_copy, tBgB(_, _, _, kt), tBsB(_, _, _, kt % kStages), tBcB, rows_b,
                                               k_len - kt * kBlockK);
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
  __syncthreads();  // the pipeline's shared memory is free for the epilogue
}

}  // namespace cute_ops::gemm_pair
