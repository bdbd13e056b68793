#pragma once
// Tile configuration of the SM90 forward kernel (flash_fwd_kernel_sm90.h): tile sizes, the two
// wgmma tilings, shared-memory layouts and their TMA copy types, for one (head dim, tile, stages,
// element type). The per-head-dim choice lives in flash_fwd_launch_sm90.h.
//
// Warp groups: one producer (TMA loads) and kBlockM / 64 consumers, each owning 64 query rows of
// the tile: S = Q K^T with both operands in shared memory, O += P V with P from registers.
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/pipeline.hpp>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace cute_ops::flash {

using namespace cute;

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kStages_, typename Element_>
struct FlashFwdTraitsSm90 {
  using Element = Element_;  // cutlass::half_t or cutlass::bfloat16_t
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;  // K and V tiles in flight, each in its own ring
  static constexpr int kConsumerGroups = kBlockM / 64;
  static constexpr int kMmaThreads = kConsumerGroups * 128;
  static constexpr int kLoadThreads = 128;
  // Named barrier ids (CUTLASS offsets them past the ones it reserves): consumer group g's
  // ping-pong turn is kTurnBarrier + g, its epilogue's kEpilogueBarrier + g.
  static constexpr int kTurnBarrier = 1;
  static constexpr int kEpilogueBarrier = kTurnBarrier + kConsumerGroups;
  static constexpr int kNThreads = kLoadThreads + kMmaThreads;
  static_assert(kBlockM % 64 == 0 && kHeadDim % 16 == 0 && kBlockN % 16 == 0);

  using TileShapeS = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // S = Q K^T: (M, N, K)
  using TileShapeO = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // O = P V:   (M, N, K)
  // The consumer warp groups stack along M; each instruction is 64 rows x the tile's N.
  using AtomLayout = Layout<Shape<Int<kConsumerGroups>, _1, _1>>;
  using TiledMmaS = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileShapeS>(), AtomLayout{}));
  // V is stored [kBlockN, kHeadDim] with the head dim contiguous, i.e. N-major for this product.
  using TiledMmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileShapeO, GMMA::Major::K, GMMA::Major::MN>(), AtomLayout{}));
  // One instruction spans the key block: a block of N outside CuTe's default wgmma shapes (80) needs
  // CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED before the first CuTe header (flash_fwd_launch_sm90.h).
  static_assert(size<1>(typename TiledMmaS::AtomShape_MNK{}) == kBlockN, "S = Q K^T would take several wgmma a k-slice");

  // K-major (head dim contiguous) swizzled layouts that wgmma reads and TMA writes.
  template <int kRows>
  using SmemAtom = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kRows>,
                                                                                Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom<kBlockM>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV =
      decltype(tile_to_shape(SmemAtom<kBlockN>{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V^T for O = P V is a view of V's ring (head dim x keys x stages), never a copy: the transposed
  // view of a K-major swizzle atom is an MN-major one, which wgmma reads as such.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutKV{}, make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  using SmemLayoutO = SmemLayoutQ;  // O is staged here for the TMA store
  // One consumer group's 64 rows of it, as each group's store reads them: group g's start
  // kOGroupOffset x g elements in. (The layout stacks its swizzle atoms along the rows first, and
  // the offset is a whole number of swizzle periods, so the swizzle leaves it alone: checked.)
  using SmemLayoutOGroup =
      decltype(composition(SmemLayoutO{}, make_layout(Shape<_64, Int<kHeadDim>>{}, make_stride(_1{}, Int<kBlockM>{}))));
  static constexpr int kOGroupOffset = 64 * size<1>(SmemAtom<kBlockM>{});
  static_assert(kOGroupOffset % 1024 == 0 || kBlockM == 64);

  // Global tensors as TMA sees them: (rows, head dim, heads, batch), the head dim contiguous.
  using StrideQKVO = Stride<int64_t, _1, int64_t, int64_t>;
  using ShapeQKVO = Shape<int32_t, Int<kHeadDim>, int32_t, int32_t>;
  template <typename Op, typename SmemLayout, typename Tile>
  using TmaFor = decltype(make_tma_copy(Op{},
                                        make_tensor(make_gmem_ptr(static_cast<Element*>(nullptr)), ShapeQKVO{},
                                                    StrideQKVO{}),
                                        SmemLayout{}, Tile{}, _1{}));
  using TmaQ = TmaFor<SM90_TMA_LOAD, SmemLayoutQ, Shape<Int<kBlockM>, Int<kHeadDim>>>;
  using TmaKV = TmaFor<SM90_TMA_LOAD, decltype(take<0, 2>(SmemLayoutKV{})), Shape<Int<kBlockN>, Int<kHeadDim>>>;
  using TmaO = TmaFor<SM90_TMA_STORE, SmemLayoutOGroup, Shape<_64, Int<kHeadDim>>>;

  static constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(Element);  // one stage of K, or of V

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;  // one for K, one for V
  using PipelineState = typename Pipeline::PipelineState;

  // Shared memory beyond Q, K and V, by priority, where it fits (1 KB kept for the barriers):
  //   - O a buffer of its own, so that the next tile's Q can load while this tile's O is stored;
  //     otherwise (head dim 256) O is staged in Q's buffer, and the next Q waits for the store.
  //   - Q two buffers, so that the producer loads the next tile's Q while this tile computes
  //     (one buffer: once the consumers are done with this tile's, a latency at every tile).
  static constexpr int kQTileBytes = cosize_v<SmemLayoutQ> * sizeof(Element);
  static constexpr int kKVRingBytes = 2 * cosize_v<SmemLayoutKV> * sizeof(Element);
  static constexpr int kSmemBudget = (227 - 1) * 1024;
  static constexpr bool kSeparateO = 2 * kQTileBytes + kKVRingBytes <= kSmemBudget;
  static constexpr int kQStages = kSeparateO && 3 * kQTileBytes + kKVRingBytes <= kSmemBudget ? 2 : 1;
  struct BufferO {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutO>> o;
  };
  struct NoBufferO {};
  struct SharedStorage : std::conditional_t<kSeparateO, BufferO, NoBufferO> {
    alignas(1024) cute::array_aligned<Element, kQStages * cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutKV>> v;
    typename Pipeline::SharedStorage pipeline_k;
    typename Pipeline::SharedStorage pipeline_v;
    alignas(8) uint64_t q_full[kQStages];   // a tile's Q has landed (transaction barrier)
    alignas(8) uint64_t q_empty[kQStages];  // the consumers are done with it (every consumer thread arrives)
    int tile_idx[kQStages];                 // the tile of the buffer's Q (the scheduler's number)
    // That tile decoded, (m_block, bidb, bidh), by the producer: the decode's run-time divisions
    // stay off the consumers' path between a tile's Q landing and its first wgmma.
    int tile_coord[kQStages][3];
  };
  // The Q buffer and barrier phase of the n-th Q tile a CTA loads (or computes).
  struct QSlot {
    int stage, phase;
    __device__ explicit QSlot(int n) : stage(n % kQStages), phase((n / kQStages) & 1) {}
  };
  __device__ static Element* q_buffer(SharedStorage& storage, int stage) {
    return storage.q.data() + stage * cosize_v<SmemLayoutQ>;
  }
  __device__ static Element* o_buffer(SharedStorage& storage) {
    if constexpr (kSeparateO) return storage.o.data();
    else return storage.q.data();  // one Q buffer then
  }
  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "the tile config's shared memory exceeds an SM's");
};

}  // namespace cute_ops::flash
