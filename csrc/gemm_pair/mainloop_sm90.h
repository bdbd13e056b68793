#pragma once
// The SM90 mainloop of gemm_pair, shared by both GEMMs: acc += A B^T over one K range with A
// [m, k] and B [n, k] both K-major, loaded by TMA into a kStages-deep shared-memory ring that
// completes on mbarriers, multiplied by wgmma from shared memory into float32 registers.
//
// The collective is CUTLASS's (CollectiveMma for MainloopSm90TmaGmmaWarpSpecialized, built by
// CollectiveBuilder): its TMA descriptors, shared-memory layouts, pipeline and consumer loop are
// used as they are. What this type adds is the producer's load order. CUTLASS's load() issues A
// and B together, stage by stage; a GEMM1 tile must not load h (its A) before the GEMM0 tiles that
// write it are done, but its weights (B) do not depend on them. So load() here first claims the
// ring's first stages and issues only their B halves, then waits for A (`wait_for_a`), then issues
// those stages' A halves and streams both from there on. A stage's mbarrier expects the bytes of
// A and B from the start (producer_acquire), so it completes only once both have landed, whichever
// came first.
//
// A call with fewer rows than a tile (m < kBlockM, so one row block) loads A in boxes of kABoxRows
// rows, as many as cover m, instead of one tile-high box whose rows past m TMA fills with zeros:
// on an H200 the 64-row tiles' GEMM0 k-loop ran 14% slower at M = 16 than at M = 64 (the same
// weights, 48 of the box's 64 rows out of bounds; docs/perf-notes.md, session 60). The tile's
// rows past the boxes keep whatever the ring held: row r of the product depends only on row r of
// A, and no row at or past m is stored.
//
// Partition names: tXgY / tXsY are the TMA partitions of global / shared Y (X = A, B); tAgA_box
// the global one of A's row boxes.
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "gemm_pair/tile_order.h"

namespace cute_ops::gemm_pair {

using namespace cute;

// kBlockM 64: one consumer warp group (64 x 128 accumulators); 128 and 256: two, each kBlockM / 2
// rows in 64-row slabs that alternate between them (CUTLASS's "cooperative" tiling).
template <typename Element_, int kBlockM_, int kStages_>
struct MainloopSm90 {
  using Element = Element_;  // cutlass::half_t or cutlass::bfloat16_t
  static constexpr int kBlockM = kBlockM_, kBlockN = kGemmPairBlockN, kBlockK = 64;
  static constexpr int kStages = kStages_;
  using TileShape = Shape<Int<kBlockM>, Int<kBlockN>, Int<kBlockK>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Schedule = std::conditional_t<(kBlockM >= 128), cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                      cutlass::gemm::KernelTmaWarpSpecialized>;
  // A row-major [m, k] and B column-major [k, n], i.e. [n, k] K-major: both nn.Linear-style.
  using Collective = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, 8, Element,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCount<kStages>, Schedule>::CollectiveOp;

  using TiledMma = typename Collective::TiledMma;
  using Arguments = typename Collective::Arguments;
  using TensorStorage = typename Collective::TensorStorage;
  using PipelineStorage = typename Collective::PipelineStorage;
  using Pipeline = typename Collective::MainloopPipeline;
  using PipelineState = typename Collective::PipelineState;
  using StrideA = typename Collective::StrideA;
  using StrideB = typename Collective::StrideB;
  static constexpr int kMmaThreads = static_cast<int>(size(TiledMma{}));  // 128 a consumer warp group
  static constexpr uint32_t kTransactionBytes = Collective::TmaTransactionBytes;  // A and B of a stage
  static_assert(kMmaThreads == 128 * (kBlockM >= 128 ? 2 : 1));

  // A's row boxes: the first kABoxRows rows of a stage's A tile, a whole number of the swizzle
  // atom's 8 rows, so box c lands at element c * kABoxRows * kBlockK of the stage as the tile-high
  // box would put those rows (the atoms are stacked along M).
  static constexpr int kABoxRows = 16;
  using SmemLayoutABox =
      decltype(tile_to_shape(typename Collective::SmemLayoutAtomA{}, Shape<Int<kABoxRows>, Int<kBlockK>>{}));
  using ElementA = typename Collective::InternalElementA;
  using ABoxTiler = Shape<Int<kABoxRows>, Int<kBlockN>, Int<kBlockK>>;
  using TmaABox = decltype(make_tma_copy_A_sm90(
      SM90_TMA_LOAD{}, make_tensor(static_cast<const ElementA*>(nullptr), repeat_like(StrideA{}, int32_t(0)), StrideA{}),
      SmemLayoutABox{}, ABoxTiler{}, ClusterShape{}));
  static_assert(cosize(SmemLayoutABox{}) == kABoxRows * kBlockK);

  struct Params {
    typename Collective::Params collective;  // CUTLASS's: tile-high A boxes, B
    TmaABox tma_load_a_box;
    int a_boxes;  // A's row boxes a stage loads; 0: one tile-high box (m >= kBlockM)
  };

  // The TMA descriptors of one GEMM (host): A [m, k] with row stride lda, B [n, k] contiguous.
  // use_a_boxes: false forces the tile-high A box (an A/B knob of the launch).
  static Params make_params(const void* a, int64_t lda, const void* b, int m, int n, int k, bool use_a_boxes = true) {
    const StrideA stride_a{lda, _1{}, int64_t{0}};
    Arguments args{static_cast<const Element*>(a), stride_a, static_cast<const Element*>(b),
                   StrideB{int64_t{k}, _1{}, int64_t{0}}};
    Params params;
    params.collective = Collective::to_underlying_arguments(make_shape(m, n, k, 1), args, nullptr);
    params.a_boxes = use_a_boxes && m < kBlockM ? (m + kABoxRows - 1) / kABoxRows : 0;
    if (params.a_boxes) {  // the box's tensor map is encoded only where the kernel uses it
      Tensor tensor_a = make_tensor(static_cast<const ElementA*>(a), make_layout(make_shape(m, k, 1), stride_a));
      params.tma_load_a_box =
          make_tma_copy_A_sm90(SM90_TMA_LOAD{}, tensor_a, SmemLayoutABox{}, ABoxTiler{}, ClusterShape{});
    }
    return params;
  }

  // The bytes a stage's mbarrier expects: B's tile and A's boxes (the same in both GEMMs, whose A
  // have the call's m rows).
  __device__ __forceinline__ static uint32_t transaction_bytes(const Params& params) {
    if (params.a_boxes == 0) return kTransactionBytes;
    return kTransactionBytes - (kBlockM - params.a_boxes * kABoxRows) * kBlockK * uint32_t(sizeof(Element));
  }

  __device__ __forceinline__ static void prefetch_descriptors(const Params& params) {
    Collective::prefetch_tma_descriptors(params.collective);
    if (params.a_boxes) cute::prefetch_tma_descriptor(params.tma_load_a_box.get_tma_descriptor());
  }

  __device__ __forceinline__ static auto make_accumulators() {
    return partition_fragment_C(TiledMma{}, Shape<Int<kBlockM>, Int<kBlockN>>{});
  }

  // Producer, one thread: K tiles [k_tile0, k_tile0 + k_tiles) of tile (m_block, n_tile) of an
  // [m, k] x [n, k]^T product. Columns past n or k arrive as zeros (TMA's bounds), and so do rows
  // past m in a tile-high A box; with A's row boxes (m < kBlockM) the rows past the last box keep
  // stale values, which reach only output rows at or past m.
  // wait_for_a() runs once the first stages' B loads are issued, before any load of A.
  // b_streamed: B's tiles are read once, or again only soon after (the kernel decides), so their
  // L2 lines are marked evict-first: the weights' stream then leaves L2 to what is read again
  // later (h, the split-K partials) instead of pushing it out to DRAM before its readers come.
  template <typename WaitForA>
  __device__ __forceinline__ static void load(const Params& params, Pipeline& pipeline, PipelineState& state,
                                              int m, int n, int k, int m_block, int n_tile, int k_tile0,
                                              int k_tiles, bool b_streamed, TensorStorage& tensors,
                                              WaitForA&& wait_for_a) {
    const auto& tma_load_a = params.collective.tma_load_a;
    const auto& tma_load_b = params.collective.tma_load_b;
    Tensor mA = tma_load_a.get_tma_tensor(make_shape(m, k, 1));  // (m, k, 1)
    Tensor mB = tma_load_b.get_tma_tensor(make_shape(n, k, 1));  // (n, k, 1)
    using X = Underscore;
    Tensor gA = local_tile(mA, TileShape{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, m_block, _, 0);  // (BM, BK, k)
    Tensor gB = local_tile(mB, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{})(_, _, n_tile, _, 0);   // (BN, BK, k)
    Tensor sA = make_tensor(make_smem_ptr(tensors.smem_A.data()), typename Collective::SmemLayoutA{});  // (BM, BK, stages)
    Tensor sB = make_tensor(make_smem_ptr(tensors.smem_B.data()), typename Collective::SmemLayoutB{});  // (BN, BK, stages)
    auto tma_a = tma_load_a.get_slice(0);
    auto tma_b = tma_load_b.get_slice(0);
    Tensor tAgA = tma_a.partition_S(gA);  // (TMA, TMA_M, TMA_K, k)
    Tensor tAsA = tma_a.partition_D(sA);  // (TMA, TMA_M, TMA_K, stages)
    Tensor tBgB = tma_b.partition_S(gB);
    Tensor tBsB = tma_b.partition_D(sB);
    // A's row boxes (a_boxes > 0 only where m < kBlockM: m_block is 0, box c holds rows 16c..).
    Tensor mA_box = params.tma_load_a_box.get_tma_tensor(make_shape(m, k, 1));
    Tensor gA_box = local_tile(mA_box, ABoxTiler{}, make_coord(_, _, _), Step<_1, X, _1>{})(_, _, _, _, 0);  // (16, BK, boxes, k)
    auto tma_a_box = params.tma_load_a_box.get_slice(0);
    Tensor tAgA_box = tma_a_box.partition_S(gA_box);  // (TMA, TMA_M, TMA_K, boxes, k)
    const int a_boxes = params.a_boxes;

    auto barrier = [&](const PipelineState& s) -> auto& { return *pipeline.producer_get_barrier(s); };
    auto copy_a = [&](const PipelineState& s, int k_tile) {
      if (a_boxes == 0) {
        copy(tma_load_a.with(barrier(s)), tAgA(_, _, _, k_tile), tAsA(_, _, _, s.index()));
        return;
      }
      Element* stage_a = tensors.smem_A.data() + s.index() * (kBlockM * kBlockK);
      for (int c = 0; c < a_boxes; ++c) {
        Tensor sA_box = make_tensor(make_smem_ptr(stage_a + c * (kABoxRows * kBlockK)), SmemLayoutABox{});
        copy(params.tma_load_a_box.with(barrier(s)), tAgA_box(_, _, _, c, k_tile), tma_a_box.partition_D(sA_box));
      }
    };
    const auto b_hint = b_streamed ? TMA::CacheHintSm90::EVICT_FIRST : TMA::CacheHintSm90::EVICT_NORMAL;
    const int ahead = min(k_tiles, kStages);  // stages whose B is issued before the wait
    PipelineState s = state;
    for (int i = 0; i < ahead; ++i, ++s) {
      pipeline.producer_acquire(s);
      copy(tma_load_b.with(barrier(s), 0, b_hint), tBgB(_, _, _, k_tile0 + i), tBsB(_, _, _, s.index()));
    }
    wait_for_a();
    s = state;
    for (int i = 0; i < ahead; ++i, ++s) copy_a(s, k_tile0 + i);
#pragma unroll 1
    for (int i = ahead; i < k_tiles; ++i, ++s) {
      pipeline.producer_acquire(s);
      copy_a(s, k_tile0 + i);
      copy(tma_load_b.with(barrier(s), 0, b_hint), tBgB(_, _, _, k_tile0 + i), tBsB(_, _, _, s.index()));
    }
    state = s;
  }

  // Producer, one thread: B's K tiles [k_tile0, k_tile0 + k_tiles) of column tile n_tile fetched
  // into L2 by TMA prefetches (no shared memory, no barrier: a hint, wasted if the tile is not
  // loaded soon after, and safe whatever writes B later, since L2 is where every SM reads it).
  __device__ __forceinline__ static void prefetch_b(const Params& params, int n, int k, int n_tile, int k_tile0,
                                                    int k_tiles) {
    const auto& tma_load_b = params.collective.tma_load_b;
    Tensor mB = tma_load_b.get_tma_tensor(make_shape(n, k, 1));  // (n, k, 1)
    using X = Underscore;
    Tensor gB = local_tile(mB, TileShape{}, make_coord(_, _, _), Step<X, _1, _1>{})(_, _, n_tile, _, 0);  // (BN, BK, k)
    Tensor tBgB = tma_load_b.get_slice(0).partition_S(gB);
#pragma unroll 1
    for (int i = 0; i < k_tiles; ++i) prefetch(tma_load_b, tBgB(_, _, _, k_tile0 + i));
  }

  // Consumers, every thread of the consumer warp groups (thread: its index among them): acc =
  // the product over the k_tiles stages from ring position `read`, then those stages released and
  // every wgmma complete. The caller advances its position by k_tiles.
  template <typename Acc>
  __device__ __forceinline__ static void mma(const Params& params, Pipeline& pipeline, PipelineState read, Acc& acc,
                                             int k_tiles, int thread, TensorStorage& tensors) {
    Collective collective;
    collective.mma(pipeline, read, acc, k_tiles, thread, tensors, params.collective);
    collective.mma_tail(pipeline, read, k_tiles);
  }
};

}  // namespace cute_ops::gemm_pair
