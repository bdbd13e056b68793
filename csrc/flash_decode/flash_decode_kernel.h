#pragma once
// Split-KV attention of a few new query tokens over a KV cache (Flash-Decoding).
//
// Grid (kv heads x row blocks, num_splits, batch). A CTA packs the query heads that share one kv
// head, times the new tokens, into the M dimension of its MMAs (GQA packing: each cache byte is
// read once per kv head, not once per query head) and walks its share of the keys. Key tiles
// stream through a kStages-deep cp.async ring; each warp runs the FlashAttention-2 inner loop
// (S = Q K^T, online softmax, O += P V, Q and P in registers) on its own 16 keys of every tile,
// so the CTA ends with one (O, lse) per warp, merged through shared memory. With one split the
// CTA writes the output; otherwise float32 partials, which the last split of each row block to
// finish merges by lse (split_merge.h).
// New tokens (k_new / v_new) are appended by this kernel too (new_tokens.h): their keys and values
// reach shared memory from k_new / v_new, never through the cache, and one CTA per kv head writes
// them to the cache for later calls. An fp8 cache (Traits::kFp8) has its own MMA operands and
// scales (fp8_cache.h); everything else is shared.
//
// Partition names as in flash_fwd: tSrQ = thread's register fragment of Q for the S MMA, etc.
#include <cute/tensor.hpp>

#include "common/cute/online_softmax.h"
#include "common/cute/sm80_copy.h"
#include "common/cute/sm80_gemm.h"
#include "common/cute/sm80_mma.h"
#include "common/cute/softmax_merge.h"
#include "common/pdl.h"
#include "flash_decode/cache_access.h"
#include "flash_decode/flash_decode.h"
#include "flash_decode/fp8_cache.h"
#include "flash_decode/kernel_traits.h"
#include "flash_decode/new_tokens.h"
#include "flash_decode/split_merge.h"
#include "flash_decode/trace.h"


// 1 (the default): the ring's prologue and the per-row copy of a tile's last keys stay loops.
// They run once or twice a CTA, but unrolled (0) they are most of the kernel's code (the new-token
// kernel at D 128: 111 KB against 72 KB), which a call pays to fetch from DRAM when the kernels
// before it swept L2, as the LLaMA model's cuBLAS matmuls do above 8 rows (10 us a call after a
// sweep, H200, docs/perf-notes.md sessions 48-49). The per-row loop's group index stays a
// constant where a slab is one 16-key group: a run-time index put the main loop's prefetched slab
// lookup in local memory (30-50% slower from 8k keys, session 49's first form). 0 keeps the
// unrolled form, for A/Bs.
#ifndef CUTE_OPS_DECODE_COMPACT
#define CUTE_OPS_DECODE_COMPACT 1
#endif

// 1 (the default): thread 0 of each CTA prefetches its sequence's length and first block-table
// entries into L2 before the wait on the previous kernel (cache_access.h, prefetch_sequence_meta),
// so the chain length -> table entry -> first tile meets L2, not DRAM, after the wait. One H200,
// graph-replayed benchmark cases up to 16k keys (session 69): every case faster, median 0.976,
// B 1 x 512 6.45 -> 6.10 us contiguous and 6.79 -> 6.33 paged; large caches 0.985-0.998.
// 0: no prefetch, for A/Bs.
#ifndef CUTE_OPS_DECODE_PREFETCH_META
#define CUTE_OPS_DECODE_PREFETCH_META 1
#endif

namespace cute_ops::decode {

using namespace cute;
using sm80::acc_as_a_operand;
using sm80::acc_rowcol;
using sm80::convert_to;
using sm80::cp_async_16;
using sm80::gemm_rs;

// kNewTokens: the call appends new tokens (p.seqlen_new > 0). Calls without have their own
// instantiation with none of that code: in one kernel, its mere presence (more code, more
// registers) cost calls without new tokens 0.2-0.3 us at B = 1-4 x 512-2k (H200, session 29).
template <typename Traits, bool kNewTokens>
__global__ void __launch_bounds__(Traits::kNThreads) flash_decode_kernel(const __grid_constant__ FlashDecodeParams p) {
  using Element = typename Traits::Element;
  using CacheElement = typename Traits::CacheElement;
  constexpr bool kFp8 = Traits::kFp8;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kStages = Traits::kStages;
  constexpr int kNWarps = Traits::kNWarps;
  extern __shared__ __align__(128) char smem[];

  // The kv heads (and row blocks) of one (split, sequence) are neighbours in the grid: they run
  // together and read the same cache rows ([.., keys, heads, d] keeps a key's heads side by side),
  // so DRAM sees one contiguous stream per split instead of h_k strided ones.
  const int split = blockIdx.y;
  const int bidb = blockIdx.z;
  const int group = p.h / p.h_k;
  const int rows = p.sq * group;  // packed (token, query head) rows of this kv head
  const int m_blocks = (rows + kBlockM - 1) / kBlockM;
  const int m_block = blockIdx.x % m_blocks;
  const int bidh_k = blockIdx.x / m_blocks;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  // Packed row r = token * group + head-in-group.
  auto q_row_offset = [&](int r) -> index_t {
    const int i = r / group, g = r - i * group;
    return bidb * p.q_batch_stride + i * p.q_row_stride + (bidh_k * group + g) * p.q_head_stride;
  };

  Element* sQ_ptr = reinterpret_cast<Element*>(smem);
  char* ring = reinterpret_cast<char*>(sQ_ptr + Traits::kQElems);
  const int chunk_col = (tid % Traits::kChunksPerRow) * Traits::kElemsPerChunk;
  const int chunk_row = tid / Traits::kChunksPerRow;

  // Nothing global is read before the previous kernel (whatever ran before the op, which may
  // have written q, k_new and v_new) has finished: before the wait come only L2 prefetches
  // (PREFETCH_META). The stream's next kernel may be scheduled from here on (it waits for this
  // grid's end before it reads anything).
  DECODE_TRACE(0);
#if CUTE_OPS_DECODE_PREFETCH_META
  if (tid == 0) prefetch_sequence_meta(p, bidb, split, kBlockN);
#endif
  wait_for_previous_grid();
  allow_dependent_launch();
  DECODE_TRACE(1);

  // Q rows, zero past the last packed row, issued before the length is read (RoPE, which needs the
  // positions, rotates them in shared memory once they have landed).
  const Element* q = static_cast<const Element*>(p.q);
  Tensor sQ = make_tensor(make_smem_ptr(sQ_ptr), typename Traits::SmemLayoutQ{});
#pragma unroll
  for (int r0 = 0; r0 < kBlockM; r0 += Traits::kRowsPerPass) {
    const int r = m_block * kBlockM + r0 + chunk_row;
    const bool valid = r < rows;
    cp_async_16(&sQ(r0 + chunk_row, chunk_col), valid ? q + q_row_offset(r) + chunk_col : q, valid);
  }

  // A bad sequence (cache_access.h) attends over no keys and ends poisoned: NaN outputs. So does
  // one whose block table names a page the cache does not have (found in issue_slab, which then
  // reads page 0 instead, and reported after the loop, away from the loads).
  // An fp8 cache's scales for this kv head (fp8_cache.h): k_scale joins the softmax scale (its sign
  // goes to q, so the softmax sees a positive scale), v_scale the output.
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kFp8) {
    k_scale = p.k_scale[bidh_k * p.kv_scale_stride];
    v_scale = p.v_scale[bidh_k * p.kv_scale_stride];
  }
  const SequenceExtent extent = check_sequence(p, bidb, /*report=*/tid == 0);
  const int seqlen = extent.seqlen;
  // Keys below `cached` come from the cache; the new tokens' keys [cached, seqlen) from k_new/v_new.
  const int cached = kNewTokens ? extent.cached : seqlen;
  bool poisoned = !extent.ok;
  int bad_page_key = -1, bad_page = 0;
  const int n_tiles = (seqlen + kBlockN - 1) / kBlockN;
  const int tiles_per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  const int tile_begin = split * tiles_per_split;
  const int tile_end = min(n_tiles, tile_begin + tiles_per_split);

  // The new tokens' loads, ahead of the cache's (new_tokens.h says why): their rows when this CTA
  // appends them (split 0's first row block of each kv head; no CTA of this launch reads them
  // from the cache) or attends them, the cos/sin of their positions when rotating.
  const bool appends = kNewTokens && extent.ok && split == 0 && m_block == 0;
  const bool stage_rows =
      appends || (kNewTokens && extent.ok && tile_begin < tile_end && tile_end * kBlockN > cached);
  const bool rotate = kNewTokens && p.rotary_cos != nullptr && extent.ok;  // all three false without new tokens
  NewTokens<Element, kHeadDim, Traits::kNThreads, CacheElement> new_tokens(smem + Traits::kNewTokensOffset);
  if constexpr (kNewTokens) new_tokens.load(p, bidb, bidh_k, cached, stage_rows, rotate, tid);

  // This warp's slab (its kWarpKeys keys) of one K and V tile into ring stage `stage`; keys past the
  // cached ones are zeros. Each warp loads and reads only its own slabs, so the ring needs no
  // barrier between warps: a warp refills a stage as soon as it has read it, and keeps all
  // kStages of its tiles in flight while it waits. Slabs are loaded in increasing key order, so
  // the block-table window only moves forward.
  //
  // In two steps: locate_slab finds the rows (block-table lookup, addresses) before the warp waits
  // for the tile whose stage the slab will refill, issue_slab copies once the stage has been read.
  // With one CTA an SM each SM sub-partition runs a single warp, so whatever the warp does between
  // reading a stage and refilling it is time with fewer bytes in flight; the paged path's lookup
  // done there made paged caches 9% slower than contiguous ones at the same addresses (H200,
  // session 28).
  PageWindow pages;
  pages.start(p, bidb, tile_begin * kBlockN + warp * Traits::kWarpKeys, lane);
  // Warp w's K (is_value 0) or V (1) slab of ring stage `stage`.
  auto slab_at = [&](int stage, int is_value, int w) {
    return ring + ((stage * 2 + is_value) * kNWarps + w) * Traits::kSlabBytes;
  };
  const int slab_col = (lane % Traits::kCacheChunksPerRow) * Traits::kCacheElemsPerChunk;
  const int slab_row = lane / Traits::kCacheChunksPerRow;
  const CacheElement* k_head = static_cast<const CacheElement*>(p.k_cache) + bidh_k * p.k_head_stride + slab_col;
  const CacheElement* v_head = static_cast<const CacheElement*>(p.v_cache) + bidh_k * p.v_head_stride + slab_col;
  // A slab's keys in groups of 16, one lookup a group: a page (a multiple of 16 keys) never splits
  // a group, but may split a 32-key slab (fp8 caches).
  constexpr int kGroups = Traits::kWarpKeys / 16;
  struct SlabSource {
    int key0;
    int page[kGroups], row[kGroups];
    bool whole;  // all kWarpKeys keys cached, on pages the cache has: the plain copy
    const CacheElement* k[kGroups];  // this lane's first row of each group: (page, row + slab_row)
    const CacheElement* v[kGroups];
  };
  auto locate_slab = [&](int tile) {
    SlabSource src;
    src.key0 = tile * kBlockN + warp * Traits::kWarpKeys;
    src.whole = src.key0 + Traits::kWarpKeys <= cached;
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) {
      pages.locate(p, bidb, src.key0 + 16 * gi, lane, src.page[gi], src.row[gi]);
      src.whole = src.whole && page_ok(p, src.page[gi]);
      src.k[gi] = k_head + src.page[gi] * p.k_page_stride + (src.row[gi] + slab_row) * p.k_row_stride;
      src.v[gi] = v_head + src.page[gi] * p.v_page_stride + (src.row[gi] + slab_row) * p.v_row_stride;
    }
    return src;
  };
  auto issue_slab = [&](const SlabSource& src, int stage) {
    char* k_dst = slab_at(stage, 0, warp);
    char* v_dst = slab_at(stage, 1, warp);
    if (src.whole) {
#pragma unroll
      for (int r0 = 0; r0 < Traits::kWarpKeys; r0 += Traits::kSlabRowsPerPass) {
        const int in_slab = Traits::slab_offset(r0 + slab_row, slab_col);
        cp_async_16(k_dst + in_slab, src.k[r0 / 16] + (r0 % 16) * p.k_row_stride, true);
        cp_async_16(v_dst + in_slab, src.v[r0 / 16] + (r0 % 16) * p.v_row_stride, true);
      }
      return;
    }
    // The sequence's last keys (zero-filled past `cached`), or a page the cache does not have
    // (poisons the sequence; page 0 is read instead).
    // Compact: a loop where the slab has one 16-key group (a run-time index into src's arrays
    // would put them in local memory).
#if CUTE_OPS_DECODE_COMPACT
#pragma unroll (kGroups == 1 ? 1 : Traits::kWarpKeys / Traits::kSlabRowsPerPass)
#else
#pragma unroll
#endif
    for (int r0 = 0; r0 < Traits::kWarpKeys; r0 += Traits::kSlabRowsPerPass) {
      // A pass's rows are in one group. Compact: a constant where there is one group, since a
      // run-time index into src's arrays puts src, the main loop's prefetched lookup, in local
      // memory. (The unrolled loop's r0 / 16 is a constant already.)
#if CUTE_OPS_DECODE_COMPACT
      const int gi = kGroups == 1 ? 0 : r0 / 16;
#else
      const int gi = r0 / 16;
#endif
      const int r = r0 + slab_row;
      const int key = src.key0 + r;
      const bool valid = key < cached;  // new keys: zeros here, written by NewTokens::put
      int page = valid ? src.page[gi] : 0;
      const int row = valid ? src.row[gi] + r - 16 * gi : 0;
      if (valid && !page_ok(p, page)) {
        poisoned = true, bad_page_key = key, bad_page = page;
        page = 0;
      }
      const int in_slab = Traits::slab_offset(r, slab_col);
      cp_async_16(k_dst + in_slab, k_head + page * p.k_page_stride + row * p.k_row_stride, valid);
      cp_async_16(v_dst + in_slab, v_head + page * p.v_page_stride + row * p.v_row_stride, valid);
    }
  };

  // Prologue: Q with the first tile, then the rest of the ring. One commit group per stage, empty
  // ones included, so that "wait until at most kStages - 1 groups are pending" always means the
  // current tile has landed.
#if CUTE_OPS_DECODE_COMPACT
#pragma unroll 1
#else
#pragma unroll
#endif
  for (int s = 0; s < kStages; ++s) {
    if (tile_begin + s < tile_end) issue_slab(locate_slab(tile_begin + s), s);
    cute::cp_async_fence();
  }

  if (stage_rows) {
    new_tokens.store_pages(p, cached, tile_begin * kBlockN, min(seqlen, tile_end * kBlockN), tid, poisoned,
                           bad_page_key, bad_page);
  }

  typename Traits::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_thread_slice(lane);
  Tensor tSrQ = thr_mma.partition_fragment_A(sQ);  // (MMA, MMA_M, MMA_K): all of Q, kept in registers
  // The fp8 path's Q, as half in its own operand order, and the power of two each of this lane's
  // two rows (g, g + 8) was scaled by (fp8_cache.h).
  uint32_t q_fp8[kFp8 ? fp8::kChunks : 1][4];
  float q_unscale[2] = {1.f, 1.f};
  const float scale_softmax = p.scale_softmax * fabsf(k_scale);
  const float scale_softmax_log2 = p.scale_softmax_log2 * fabsf(k_scale);
  const float inv_scale[2] = {1.f / k_scale, 1.f / v_scale};  // the append's (fp8)
  Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
  clear(acc_o);
  Tensor acc_o_rc = make_tensor(acc_o.data(), acc_rowcol(acc_o.layout()));
  constexpr int kRows = 2 * decltype(size<1>(acc_o))::value;
  OnlineSoftmax<kRows> softmax;

  auto smem_copy_q = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_q = smem_copy_q.get_thread_slice(lane);
  auto smem_copy_k = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma);
  auto smem_thr_copy_k = smem_copy_k.get_thread_slice(lane);
  auto smem_copy_v = make_tiled_copy_B(typename Traits::SmemCopyAtomTransposed{}, tiled_mma);
  auto smem_thr_copy_v = smem_copy_v.get_thread_slice(lane);
  // (row, key) of each S accumulator element within a warp's (kBlockM x 16) tile.
  Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<Traits::kWarpKeys>>{}));

  // Keys a packed row may see: all `seqlen` keys, or with causal masking among the new tokens,
  // those up to its own position (seqlen - sq + token).
  const int first_limited_key = p.causal ? seqlen - p.sq : seqlen - 1;  // the smallest row limit

  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const bool refill = tile + kStages < tile_end;
    SlabSource next{};
    if (refill) next = locate_slab(tile + kStages);  // before the wait: see locate_slab
    cute::cp_async_wait<kStages - 1>();
    __syncwarp();  // this warp's slabs of the tile have landed for every lane
    if (tile == tile_begin) {
      // Q and the new rows arrived with the first tile (every thread's first cp.async group):
      // rotate them, write the cache rows, take Q into registers. Here rather than before the loop:
      // there, calls without new tokens were 0.4 us slower at B = 1 x 2k (H200, session 29).
      __syncthreads();
      if (rotate) {
        new_tokens.rotate(p, sQ, cached, m_block * kBlockM, min(kBlockM, rows - m_block * kBlockM), group,
                          stage_rows, tid);
        __syncthreads();
      }
      if (appends) new_tokens.append(p, bidh_k, cached, tid, inv_scale);
      DECODE_TRACE(2);
      if constexpr (kFp8) {
        fp8::load_q(sQ, lane, (p.negate_q != (k_scale < 0.f)) ? -1.f : 1.f, q_fp8, q_unscale);
      } else {
        copy(smem_copy_q, smem_thr_copy_q.partition_S(sQ), smem_thr_copy_q.retile_D(tSrQ));
        if (p.negate_q) {
#pragma unroll
          for (int i = 0; i < size(tSrQ); ++i) tSrQ(i) = -tSrQ(i);
        }
      }
    }
    if (kNewTokens && (tile + 1) * kBlockN > cached) {  // CTA-uniform: the tile holds new tokens
      __syncthreads();  // every warp's zero-filled slabs have landed
      const int stage = (tile - tile_begin) % kStages;
      auto slab_base = [&](int w, int is_value) { return slab_at(stage, is_value, w); };
      auto slab_offset = [](int r, int col) { return Traits::slab_offset(r, col); };
      new_tokens.template put<Traits::kWarpKeys>(cached, max(cached, tile * kBlockN), min(seqlen, (tile + 1) * kBlockN),
                                                 tile * kBlockN, slab_base, slab_offset, tid, inv_scale);
      __syncthreads();
    }

    const int stage = (tile - tile_begin) % kStages;
    Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<Traits::kWarpKeys>>{});
    clear(acc_s);
    if constexpr (kFp8) {
      fp8::scores<Traits::kWarpKeys>(acc_s, slab_at(stage, 0, warp), q_fp8, lane);
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i) acc_s(i) *= q_unscale[(i / 2) % 2];  // C registers 2, 3: row g + 8
    } else {
      Tensor sK = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(slab_at(stage, 0, warp))),
                              typename Traits::SmemLayoutSlab{});
      Tensor tSrK = thr_mma.partition_fragment_B(sK);
      gemm_rs(acc_s, tSrQ, tSrK, smem_thr_copy_k.partition_S(sK), tiled_mma, smem_copy_k, smem_thr_copy_k);
    }

    const int key0 = tile * kBlockN + warp * Traits::kWarpKeys;
    if (key0 + Traits::kWarpKeys - 1 > first_limited_key) {  // warp-uniform: only the last tiles
#pragma unroll
      for (int i = 0; i < size(acc_s); ++i) {
        const int r = m_block * kBlockM + get<0>(tScS(i));
        const int key = key0 + get<1>(tScS(i));
        const int limit = p.causal ? seqlen - p.sq + r / group : seqlen - 1;
        if (key > limit) acc_s(i) = -INFINITY;
      }
    }

    Tensor scores = make_tensor(acc_s.data(), acc_rowcol(acc_s.layout()));
    softmax.update(scores, acc_o_rc, scale_softmax_log2);
    if constexpr (kFp8) {
      fp8::accumulate_pv<Traits::kWarpKeys>(acc_o, acc_s, slab_at(stage, 1, warp), lane);
    } else {
      Element* v_slab = reinterpret_cast<Element*>(slab_at(stage, 1, warp));
      Tensor sVt = make_tensor(make_smem_ptr(v_slab), typename Traits::SmemLayoutSlabT{});
      Tensor sVtNoSwizzle = make_tensor(make_smem_ptr(v_slab), typename Traits::SmemLayoutSlabTNoSwizzle{});
      Tensor rP = convert_to<Element>(acc_s);
      Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
      Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle);
      gemm_rs(acc_o, tOrP, tOrVt, smem_thr_copy_v.partition_S(sVt), tiled_mma, smem_copy_v, smem_thr_copy_v);
    }

    __syncwarp();  // every lane has read the stage: refill it with this warp's slab kStages tiles on
    if (refill) issue_slab(next, stage);
    cute::cp_async_fence();
  }

  // Merge the warps: each writes its normalised O and its rows' lse (natural log) to shared
  // memory, reusing the ring; kBlockM threads turn the lse values into per-warp weights, then each
  // thread merges four adjacent columns of the valid rows (only `rows` of the 16 are real: 4 for
  // one token under GQA 4). Kept short and parallel: with four warps an SM there is nobody to
  // hide a serial tail behind.
  DECODE_TRACE(3);
  cute::cp_async_wait<0>();
  const bool poison_rows = __syncthreads_or(poisoned);
  if (bad_page_key >= 0) report_bad_page(p, bidb, bad_page_key, bad_page);
  float lse[kRows];
  softmax.finalize(acc_o_rc, scale_softmax, lse);
  constexpr int kLd = Traits::kWarpMergeLd;
  float* sO = reinterpret_cast<float*>(ring);      // [warp][row][kLd]
  float* sLse = reinterpret_cast<float*>(sQ_ptr);  // [warp][row]; Q is no longer needed
  float* sWeight = sLse + kNWarps * kBlockM;        // [warp][row]
  float* sRowLse = sWeight + kNWarps * kBlockM;     // [row]
  Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tOcO_rc = make_tensor(tOcO.data(), acc_rowcol(tOcO.layout()));
#pragma unroll
  for (int mi = 0; mi < size<0>(acc_o_rc); ++mi) {
    const int row = get<0>(tOcO_rc(mi, 0));
#pragma unroll
    for (int ni = 0; ni < size<1>(acc_o_rc); ++ni) {
      const int col = get<1>(tOcO_rc(mi, ni));
      sO[(warp * kBlockM + row) * kLd + (kFp8 ? fp8::o_column(col) : col)] = acc_o_rc(mi, ni);
    }
    if (get<1>(tOcO_rc(mi, 0)) == 0) sLse[warp * kBlockM + row] = lse[mi];
  }
  __syncthreads();
  if (tid < kBlockM) {
    // The warps' lse values are one batch of partials (softmax_merge.h has the empty and NaN
    // rules); nothing is accumulated yet, so the rescale factor is unused. A poisoned row, or a
    // NaN lse (a NaN in K reached a warp's scores), makes inv NaN and with it every weight, so
    // the row's output is NaN; a NaN in V shows in that warp's O alone.
    float lse_w[kNWarps], wt[kNWarps];
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) lse_w[w] = sLse[w * kBlockM + tid];
    SoftmaxMergeState state = SoftmaxMergeState::empty();
    state.merge(lse_w, wt);
    state.poison(poison_rows);
    const float inv = state.inv_sum();
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) sWeight[w * kBlockM + tid] = wt[w] * inv * v_scale;
    sRowLse[tid] = state.lse();
  }
  __syncthreads();

  constexpr int kThreadsPerRow = kHeadDim / 4;
  const int valid_rows = min(kBlockM, rows - m_block * kBlockM);
  const int col = (tid % kThreadsPerRow) * 4;
  for (int row = tid / kThreadsPerRow; row < valid_rows; row += Traits::kNThreads / kThreadsPerRow) {
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) {
      const float wt = sWeight[w * kBlockM + row];
      const float4 x = *reinterpret_cast<const float4*>(&sO[(w * kBlockM + row) * kLd + col]);
      o.x += wt * x.x, o.y += wt * x.y, o.z += wt * x.z, o.w += wt * x.w;
    }
    const PackedRow packed(p, bidb, bidh_k, m_block * kBlockM + row);
    if (p.num_splits == 1) {
      store_out4<Element>(p, bidb, packed, col, o);
      if (col == 0) p.lse[packed.lse_row] = sRowLse[row];
    } else {
      const index_t part = static_cast<index_t>(split) * p.b * p.h * p.sq + packed.lse_row;
      *reinterpret_cast<float4*>(p.o_partial + part * kHeadDim + col) = o;
      if (col == 0) p.lse_partial[part] = sRowLse[row];
    }
  }
  if (p.num_splits > 1) {  // CTA-uniform
    int* counter = p.split_counters + static_cast<index_t>(bidb) * gridDim.x + blockIdx.x;
    merge_splits_if_last<Element, kHeadDim, Traits::kNThreads>(p, counter, bidb, bidh_k, m_block * kBlockM,
                                                              valid_rows);
  }
  DECODE_TRACE(4);
}

}  // namespace cute_ops::decode
