#pragma once
// The SM90 forward mainloop: the producer's TMA loads and the consumers' wgmma + online softmax
// over one tile's key blocks, last to first (only the first few visited need masking, as in the
// SM80 kernel).
//
// Producer (one thread): the tile's Q into a free Q buffer (Traits::kQStages of them), completing
// on that buffer's transaction barrier; then K_j and V_j per key block into two rings of kStages
// tiles (CUTLASS's PipelineTmaAsync, one each), so K_{j-1} and V_{j-1} stream in while the
// consumers work on block j, and the next tile's first blocks while they finish this one.
// Consumers (each warp group 64 query rows): S = Q K_j^T (wgmma, both operands in shared memory),
// K_j's slot released as soon as that wgmma is done, mask, online softmax in registers, P rounded
// to 16 bits and re-laid-out as the A operand of O += P V_j (wgmma, V^T a view of V's ring).
//
// Partition names: tXgY / tXsY are the TMA partitions of global / shared Y (X = Q, K, V);
// tSrY / tOrY the operand fragments of S = Q K^T and O = P V; tScS the (row, col) of each S
// accumulator element, for masking.
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "common/cute/online_softmax.h"
#include "common/cute/sm80_mma.h"
#include "common/cute/sm90_mma.h"
#include "flash_fwd/flash_fwd.h"
#include "flash_fwd/mask.h"
#include "flash_fwd/seq_info.h"
#include "flash_fwd/tma_layout.h"

namespace cute_ops::flash {

using namespace cute;

// Where a tile of queries starts and which key blocks it visits: [0, n_max), the ones from
// n_unmasked up masked. Producer and consumers derive the same range from the same inputs.
template <int kBlockM, int kBlockN, bool kIsCausal>
struct KeyBlockRange {
  int n_max, n_unmasked;

  __device__ KeyBlockRange(int m_block, int seqlen_q, int seqlen_k) {
    n_max = ceil_div(seqlen_k, kBlockN);
    n_unmasked = seqlen_k / kBlockN;  // wholly inside the sequence
    if constexpr (kIsCausal) {
      // Bottom-right diagonal: query row r sees keys up to r + seqlen_k - seqlen_q.
      const int shift = seqlen_k - seqlen_q;
      n_max = min(n_max, ceil_div((m_block + 1) * kBlockM + shift, kBlockN));
      // Unmasked: the block's last key visible to the tile's first query.
      const int first_row_last_key = m_block * kBlockM + shift;
      n_unmasked = min(n_unmasked, first_row_last_key < 0 ? 0 : (first_row_last_key + 1) / kBlockN);
    }
  }
};

// kOverlap, kPingPong: the consumers' schedule (mma() below).
template <typename Traits, bool kIsCausal, bool kOverlap, bool kPingPong>
struct MainloopSm90 {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
  using Pipeline = typename Traits::Pipeline;
  using PipelineState = typename Traits::PipelineState;
  using SharedStorage = typename Traits::SharedStorage;
  using Blocks = KeyBlockRange<kBlockM, kBlockN, kIsCausal>;

  // The TMA descriptors of one call (host-encoded; kernel argument).
  struct Params {
    typename Traits::TmaQ tma_q;
    typename Traits::TmaKV tma_k;
    typename Traits::TmaKV tma_v;
  };

  // (rows, head dim, heads, batch) over a [batch, rows, heads, head dim] tensor of the call, with
  // the strides TMA is given (tma_layout.h; the op checked them with tma_accepts).
  static auto global_tensor(const void* ptr, int rows, int heads, int batch, int64_t row_stride,
                            int64_t head_stride, int64_t batch_stride) {
    constexpr int e = sizeof(Element);
    return make_tensor(make_gmem_ptr(static_cast<Element*>(const_cast<void*>(ptr))),
                       make_shape(rows, Int<kHeadDim>{}, heads, batch),
                       make_stride(tma_stride(row_stride, rows, e), _1{}, tma_stride(head_stride, heads, e),
                                   tma_stride(batch_stride, batch, e)));
  }

  static Params make_params(const FlashFwdParams& p) {
    const TmaExtents x(p);
    auto q = global_tensor(p.q, x.rows_q, p.h, x.batch, p.q_row_stride, p.q_head_stride, p.q_batch_stride);
    auto k = global_tensor(tma_k_source(p, p.k), x.rows_k, p.h_k, x.batch, p.k_row_stride, p.k_head_stride,
                           p.k_batch_stride);
    auto v = global_tensor(tma_k_source(p, p.v), x.rows_k, p.h_k, x.batch, p.v_row_stride, p.v_head_stride,
                           p.v_batch_stride);
    const auto tile_q = Shape<Int<kBlockM>, Int<kHeadDim>>{};
    const auto tile_kv = Shape<Int<kBlockN>, Int<kHeadDim>>{};
    const auto stage = take<0, 2>(typename Traits::SmemLayoutKV{});
    return {make_tma_copy(SM90_TMA_LOAD{}, q, typename Traits::SmemLayoutQ{}, tile_q, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, k, stage, tile_kv, _1{}),
            make_tma_copy(SM90_TMA_LOAD{}, v, stage, tile_kv, _1{})};
  }

  __device__ static void prefetch_descriptors(const Params& params) {
    prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
  }

  // Producer, one thread, per tile: Q into q_slot's buffer (which the consumers are done with:
  // the caller waited), then K and V of blocks n_max - 1 down to 0, of sequence `seq`, into the
  // rings where `write` left them after the previous tile.
  __device__ static void load(const Params& params, const FlashFwdParams& p, const SeqInfo& seq, int m_block,
                              int bidb, int bidh, const Blocks& blocks, Pipeline& pipeline_k, Pipeline& pipeline_v,
                              PipelineState& write, typename Traits::QSlot q_slot, SharedStorage& storage) {
    const int bidh_k = bidh / (p.h / p.h_k);
    const TmaExtents x(p);
    const int batch = p.cu_seqlens_q ? 0 : bidb;
    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(x.rows_q, Int<kHeadDim>{}, p.h, x.batch));
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(x.rows_k, Int<kHeadDim>{}, p.h_k, x.batch));
    Tensor mV = params.tma_v.get_tma_tensor(make_shape(x.rows_k, Int<kHeadDim>{}, p.h_k, x.batch));
    // This sequence's rows, from its first (varlen; 0 otherwise).
    Tensor mQs = domain_offset(make_coord(static_cast<int>(seq.q_start), _0{}), mQ(_, _, bidh, batch));
    Tensor mKs = domain_offset(make_coord(static_cast<int>(seq.k_start), _0{}), mK(_, _, bidh_k, batch));
    Tensor mVs = domain_offset(make_coord(static_cast<int>(seq.k_start), _0{}), mV(_, _, bidh_k, batch));
    Tensor gQ = local_tile(mQs, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, _0{}));
    Tensor gK = local_tile(mKs, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (BN, D, n)
    Tensor gV = local_tile(mVs, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
    Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, q_slot.stage)), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutKV{});  // (BN, D, stages)
    Tensor sV = make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutKV{});
    auto cta_q = params.tma_q.get_slice(_0{});
    auto cta_k = params.tma_k.get_slice(_0{});
    auto cta_v = params.tma_v.get_slice(_0{});
    Tensor tQgQ = cta_q.partition_S(gQ);  // (TMA, 1, 1)
    Tensor tQsQ = cta_q.partition_D(sQ);
    Tensor tKgK = cta_k.partition_S(gK);  // (TMA, 1, 1, n)
    Tensor tKsK = cta_k.partition_D(sK);  // (TMA, 1, 1, stages)
    Tensor tVgV = cta_v.partition_S(gV);
    Tensor tVsV = cta_v.partition_D(sV);

    // Rows past the tensor's end arrive as zeros (TMA's bounds), rows past a packed sequence's end
    // as the next sequence's: no predication here (TmaExtents says why neither matters).
    uint64_t* q_full = &storage.q_full[q_slot.stage];
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(q_full, Traits::kQBytes);
    copy(params.tma_q.with(*q_full), tQgQ, tQsQ);
#pragma unroll 1
    for (int n_block = blocks.n_max - 1; n_block >= 0; --n_block) {
      pipeline_k.producer_acquire(write);
      copy(params.tma_k.with(*pipeline_k.producer_get_barrier(write)), tKgK(_, _, _, n_block),
           tKsK(_, _, _, write.index()));
      pipeline_v.producer_acquire(write);
      copy(params.tma_v.with(*pipeline_v.producer_get_barrier(write)), tVgV(_, _, _, n_block),
           tVsV(_, _, _, write.index()));
      ++write;
    }
  }

  // load() in two halves, for the kernel's Q ahead (load() stays whole for the kernels without it:
  // ptxas schedules them alike then). load_q: the tile's Q, arriving on q_slot's q_full.
  // load_kv: its K and V blocks; after_fill() runs once, when the rings' kStages stages have taken
  // the tile's first blocks (or after its last block, if it has fewer): Q ahead hands the next
  // tile's Q over there.
  __device__ static void load_q(const Params& params, const FlashFwdParams& p, const SeqInfo& seq, int m_block,
                                int bidb, int bidh, typename Traits::QSlot q_slot, SharedStorage& storage) {
    const TmaExtents x(p);
    const int batch = p.cu_seqlens_q ? 0 : bidb;
    Tensor mQ = params.tma_q.get_tma_tensor(make_shape(x.rows_q, Int<kHeadDim>{}, p.h, x.batch));
    // This sequence's rows, from its first (varlen; 0 otherwise).
    Tensor mQs = domain_offset(make_coord(static_cast<int>(seq.q_start), _0{}), mQ(_, _, bidh, batch));
    Tensor gQ = local_tile(mQs, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, _0{}));
    Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, q_slot.stage)), typename Traits::SmemLayoutQ{});
    auto cta_q = params.tma_q.get_slice(_0{});
    // Rows past the tensor's end arrive as zeros (TMA's bounds), rows past a packed sequence's end
    // as the next sequence's: no predication here (TmaExtents says why neither matters).
    uint64_t* q_full = &storage.q_full[q_slot.stage];
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(q_full, Traits::kQBytes);
    copy(params.tma_q.with(*q_full), cta_q.partition_S(gQ), cta_q.partition_D(sQ));
  }
  template <typename AfterFill>
  __device__ static void load_kv(const Params& params, const FlashFwdParams& p, const SeqInfo& seq, int bidb,
                                 int bidh, const Blocks& blocks, Pipeline& pipeline_k, Pipeline& pipeline_v,
                                 PipelineState& write, SharedStorage& storage, AfterFill&& after_fill) {
    const int bidh_k = bidh / (p.h / p.h_k);
    const TmaExtents x(p);
    const int batch = p.cu_seqlens_q ? 0 : bidb;
    Tensor mK = params.tma_k.get_tma_tensor(make_shape(x.rows_k, Int<kHeadDim>{}, p.h_k, x.batch));
    Tensor mV = params.tma_v.get_tma_tensor(make_shape(x.rows_k, Int<kHeadDim>{}, p.h_k, x.batch));
    Tensor mKs = domain_offset(make_coord(static_cast<int>(seq.k_start), _0{}), mK(_, _, bidh_k, batch));
    Tensor mVs = domain_offset(make_coord(static_cast<int>(seq.k_start), _0{}), mV(_, _, bidh_k, batch));
    Tensor gK = local_tile(mKs, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));  // (BN, D, n)
    Tensor gV = local_tile(mVs, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, _0{}));
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutKV{});  // (BN, D, stages)
    Tensor sV = make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutKV{});
    auto cta_k = params.tma_k.get_slice(_0{});
    auto cta_v = params.tma_v.get_slice(_0{});
    Tensor tKgK = cta_k.partition_S(gK);  // (TMA, 1, 1, n)
    Tensor tKsK = cta_k.partition_D(sK);  // (TMA, 1, 1, stages)
    Tensor tVgV = cta_v.partition_S(gV);
    Tensor tVsV = cta_v.partition_D(sV);
    const int fill_block = blocks.n_max - 1 - Traits::kStages;  // the first block past the rings' first fill
#pragma unroll 1
    for (int n_block = blocks.n_max - 1; n_block >= 0; --n_block) {
      if (n_block == fill_block) after_fill();
      pipeline_k.producer_acquire(write);
      copy(params.tma_k.with(*pipeline_k.producer_get_barrier(write)), tKgK(_, _, _, n_block),
           tKsK(_, _, _, write.index()));
      pipeline_v.producer_acquire(write);
      copy(params.tma_v.with(*pipeline_v.producer_get_barrier(write)), tVgV(_, _, _, n_block),
           tVsV(_, _, _, write.index()));
      ++write;
    }
    if (fill_block < 0) after_fill();
  }

  // Ping-pong between the consumer warp groups (kPingPong): each issues its GEMMs only after the
  // group before it (in a ring, 0, 1, .., 0) has issued its own, so that one group's softmax runs
  // while the others' GEMMs hold the tensor cores. Named barrier kTurnBarrier + g is group g's
  // turn: its 128 threads wait on it, the previous group's 128 arrive. Group 0 starts with a turn
  // of its own, and the turns carry on from tile to tile (every group takes as many in a tile);
  // the last group's last arrival is left unmatched when the CTA ends.
  static constexpr int kTurnBarrier = Traits::kTurnBarrier, kGroups = Traits::kConsumerGroups;
  __device__ static void turn_begin(int group) {
    if constexpr (kPingPong) cutlass::arch::NamedBarrier::sync(256, kTurnBarrier + group);
  }
  __device__ static void turn_end(int group) {
    if constexpr (kPingPong) cutlass::arch::NamedBarrier::arrive(256, kTurnBarrier + (group + 1) % kGroups);
  }
  // Once per CTA, before its first tile: group 0's first turn.
  __device__ static void init_turns(int thread) {
    if constexpr (kPingPong) {
      if (thread / 128 == 0) cutlass::arch::NamedBarrier::arrive(256, kTurnBarrier);
    }
  }

  // Consumers, every thread of the consumer warp groups (thread: its index among them), per tile:
  // the unnormalised O of its rows in tOrO, the softmax state in `softmax`. read_k / read_v carry
  // the rings' positions from tile to tile; q_slot is the tile's Q buffer. after_first_s() runs
  // once, while the tile's first S is on the tensor cores (the timeline probe of trace_sm90.h; a
  // no-op in the library's build).
  //
  // kOverlap (FlashAttention-3's intra-warpgroup pipelining): S of block j-1 (blocks run last to
  // first) is issued before O += P_j V_j, and its softmax runs while that product is in flight:
  //   S_j = Q K_j^T; P_j = softmax(S_j)
  //   for each next block i:  issue S_i;  O *= r_j;  issue O += P_j V_j;  wait S_i;  release K_i;
  //                           P_i, r_i = softmax(S_i) (O untouched);  wait P_j V_j;  release V_j
  //   O *= r_last;  O += P_last V_last
  // The S accumulator is rewritten while P_j, already converted to 16 bits in its own registers,
  // feeds the product. Without kOverlap each block's two GEMMs run back to back with the softmax
  // between them.
  template <typename FragO, typename Softmax, typename AfterFirstS>
  __device__ static void mma(const FlashFwdParams& p, int m_block, int seqlen_q, int seqlen_k, const Blocks& blocks,
                             Pipeline& pipeline_k, Pipeline& pipeline_v, PipelineState& read_k,
                             PipelineState& read_v, typename Traits::QSlot q_slot, FragO& tOrO, Softmax& softmax,
                             int thread, SharedStorage& storage, AfterFirstS&& after_first_s) {
    typename Traits::TiledMmaS tiled_mma_s;
    typename Traits::TiledMmaO tiled_mma_o;
    auto thr_mma_s = tiled_mma_s.get_thread_slice(thread);
    auto thr_mma_o = tiled_mma_o.get_thread_slice(thread);
    Tensor sQ = make_tensor(make_smem_ptr(Traits::q_buffer(storage, q_slot.stage)), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(storage.k.data()), typename Traits::SmemLayoutKV{});
    Tensor sVt = make_tensor(make_smem_ptr(storage.v.data()), typename Traits::SmemLayoutVt{});
    Tensor tSrQ = thr_mma_s.partition_fragment_A(sQ);   // (MMA, MMA_M, MMA_K) descriptors
    Tensor tSrK = thr_mma_s.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stages)
    Tensor tOrVt = thr_mma_o.partition_fragment_B(sVt); // (MMA, MMA_N, MMA_K, stages)
    Tensor tScS = thr_mma_s.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor tOrO_rc = make_tensor(tOrO.data(), sm90::acc_rowcol(tOrO.layout()));
    Tensor tSrS = partition_fragment_C(tiled_mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});  // (MMA, MMA_M, MMA_N)
    Tensor scores = make_tensor(tSrS.data(), sm90::acc_rowcol(tSrS.layout()));
    // P in 16 bits, as the A operand of O += P V.
    Tensor tOrP = make_tensor<Element>(sm90::acc_as_a_operand(tSrS.layout()));
    const int group = thread / 128;

    clear(tOrO);  // the first block's rescale multiplies it by 0 (Q has landed: the caller waited)

    // The two GEMMs of a block, issued and left in flight (the caller waits with warpgroup_wait
    // and then releases the slot it read). K is waited for before the group's turn (a late K
    // then holds up only this group), V within it.
    auto issue_s = [&] {
      sm90::gemm</*kZeroInit=*/true, /*kWait=*/-1>(tiled_mma_s, tSrQ, tSrK(_, _, _, read_k.index()), tSrS);
    };
    auto issue_pv = [&] {
      pipeline_v.consumer_wait(read_v);
      sm90::gemm</*kZeroInit=*/false, /*kWait=*/-1>(tiled_mma_o, tOrP, tOrVt(_, _, _, read_v.index()), tOrO);
    };
    // Scores of block n to P (in tSrS, and rounded into tOrP by the caller), the sums moved.
    auto scores_to_p = [&](int n_block, auto masked, float (&rescale)[Softmax::kRowsPerThread]) {
      if (p.negate_q) {  // a negative softmax scale: |scale| applied to -q.k
#pragma unroll
        for (int i = 0; i < size(tSrS); ++i) tSrS(i) = -tSrS(i);
      }
      if constexpr (decltype(masked)::value) {
        apply_mask<kIsCausal>(tSrS, tScS, m_block * kBlockM, n_block * kBlockN, seqlen_q, seqlen_k);
      }
      return softmax.update_scores(scores, p.scale_softmax_log2, rescale);
    };
    // tOrP's layout is a regrouping of tSrS's, so the same coordinates of both views name the
    // same element.
    Tensor tOrP_as_s = make_tensor(tOrP.data(), tSrS.layout());
    auto round_p = [&] {
#pragma unroll
      for (int i = 0; i < size(tSrS); ++i) tOrP_as_s(i) = static_cast<Element>(tSrS(i));
    };

    int n_block = blocks.n_max - 1;
    if constexpr (kOverlap) {
      float rescale[Softmax::kRowsPerThread];
      pipeline_k.consumer_wait(read_k);
      turn_begin(group);
      issue_s();
      turn_end(group);
      after_first_s();
      sm90::wait<0>(tSrS);
      pipeline_k.consumer_release(read_k);
      ++read_k;
      bool moved = n_block >= blocks.n_unmasked ? scores_to_p(n_block, cute::true_type{}, rescale)
                                                : scores_to_p(n_block, cute::false_type{}, rescale);
      round_p();
      // One block further: S of n_block issued, then the previous block's P V. Inlined by force:
      // left to itself, nvcc made the unmasked step a call at head dim 256's 80-key blocks, its
      // captures on the stack (1.3 KB of local memory a thread). (At head dim 128 the SASS is the
      // same either way; at 64, 96 and 256's 64-key blocks the same instructions reorder.)
      auto step = [&](auto masked) __attribute__((always_inline)) {
        pipeline_k.consumer_wait(read_k);
        turn_begin(group);
        issue_s();
        if (moved) Softmax::rescale_o(tOrO_rc, rescale);
        issue_pv();
        turn_end(group);
        sm90::wait<1>(tSrS);  // S complete (the older batch); P V may still run
        pipeline_k.consumer_release(read_k);
        ++read_k;
        moved = scores_to_p(n_block, masked, rescale);
        // P V complete: tOrP and V's slot are free. After the softmax, which it would otherwise
        // be scheduled before (sm90::wait_after).
        sm90::wait_after<0>(softmax.sums_token(), tOrO, tOrP);
        pipeline_v.consumer_release(read_v);
        ++read_v;
        round_p();
      };
      --n_block;
#pragma unroll 1
      for (; n_block >= blocks.n_unmasked; --n_block) step(cute::true_type{});
#pragma unroll 1
      for (; n_block >= 0; --n_block) step(cute::false_type{});
      if (moved) Softmax::rescale_o(tOrO_rc, rescale);
      turn_begin(group);
      issue_pv();
      turn_end(group);
      sm90::wait<0>(tOrO);
      pipeline_v.consumer_release(read_v);
      ++read_v;
    } else {
      after_first_s();  // (nothing in flight to hide it under)
      auto step = [&](auto masked) {
        pipeline_k.consumer_wait(read_k);
        turn_begin(group);
        issue_s();
        turn_end(group);
        sm90::wait<0>(tSrS);
        pipeline_k.consumer_release(read_k);
        ++read_k;
        float rescale[Softmax::kRowsPerThread];
        if (scores_to_p(n_block, masked, rescale)) Softmax::rescale_o(tOrO_rc, rescale);
        round_p();
        turn_begin(group);
        issue_pv();
        turn_end(group);
        sm90::wait<0>(tOrO, tOrP);
        pipeline_v.consumer_release(read_v);
        ++read_v;
      };
      // Two call sites only, as in the SM80 kernel (a third stopped the inlining of `step`).
#pragma unroll 1
      for (; n_block >= blocks.n_unmasked; --n_block) step(cute::true_type{});
#pragma unroll 1
      for (; n_block >= 0; --n_block) step(cute::false_type{});
    }
  }
};

}  // namespace cute_ops::flash
