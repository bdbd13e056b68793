#pragma once
// The epilogue of gemm_pair: what happens to a tile's float32 accumulators. They are staged in
// shared memory as a row-major tile ([kBlockM, kBlockN], rows padded by 4 floats against bank
// conflicts), so that the activation can pair columns that sit in different threads' accumulators
// and every global store is 16 bytes. From there:
//   - GEMM0: the activation, rounded once to 16 bits, into h. SwiGLU pairs column c of the tile
//     (a gate row of b0) with column half + c (the matching up row): pack_gate_up lays b0 out so.
//   - GEMM1: the output tile.
//   - Either GEMM split along K: a float32 partial per split; the split that finishes a tile last
//     sums all partials in split order (deterministic: the sum does not depend on which split
//     came last) and runs that GEMM's store on the sum. The SM90 kernel folds GEMM1's splits
//     into one running sum in split order instead (fold_split): the same association.
// The staging tile reuses the mainloop's shared memory (the kernel's SharedStorage is a union).
// Barriers are the caller's (tile_sync.h): the threads of `barrier` are the ones that run the
// epilogue. Which counters a finished tile signals is the kernel's business, not the epilogue's.
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/activation.cuh"
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/tile_order.h"
#include "gemm_pair/tile_sync.h"

// 1 (the default): SwiGLU's h stored from the registers (Epilogue::store_h_registers) as 16-byte
// vectors, each quad's columns regrouped by shuffles first (store_row_16b); 0: 4-byte stores of
// each thread's column pairs, a warp's store covering 16 bytes of each of 8 rows. Measured against
// 0 in builds_ab on an H200 (docs/perf-notes.md, session 66): with the knob below, the fused
// launch 0.7-1.3% faster at M >= 512, level at M <= 64. Kept as a knob for A/B runs
// (NVCC_APPEND_FLAGS=-DCUTE_OPS_GEMM_PAIR_SM90_H_STORE_16B=0, its objects removed first).
#ifndef CUTE_OPS_GEMM_PAIR_SM90_H_STORE_16B
#define CUTE_OPS_GEMM_PAIR_SM90_H_STORE_16B 1
#endif
// 1 (the default): the same regrouping for GEMM1's output tiles stored from the registers
// (Epilogue::store_out_registers, full-width tiles); 0: 4-byte stores. Measured with the one above.
#ifndef CUTE_OPS_GEMM_PAIR_SM90_OUT_STORE_16B
#define CUTE_OPS_GEMM_PAIR_SM90_OUT_STORE_16B 1
#endif

namespace cute_ops::gemm_pair {

using namespace cute;

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }

// 16-bit element type <-> float, for the plain CUDA types the stores use.
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Element, cutlass::half_t>) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <typename Element>
__device__ __forceinline__ uint4 pack8(const float (&v)[8]) {
  return make_uint4(pack2<Element>(v[0], v[1]), pack2<Element>(v[2], v[3]), pack2<Element>(v[4], v[5]),
                    pack2<Element>(v[6], v[7]));
}

// kNThreads: the threads that run the epilogue, threadIdx.x kFirstThread .. kFirstThread +
// kNThreads - 1 (every thread of the CTA on SM80; the consumer warp groups, after the producer's,
// on SM90). kSumUnroll: the vectors a thread sums at once in a split-K reduction (sum_partials),
// which costs registers: 4 on SM90, whose consumer threads have 168-232; 1 on SM80, where more
// registers would cost occupancy (4 took the 16- and 64-row kernels from 78-101 to 146-182).
template <typename Element_, int kBlockM_, int kBlockN_, int kNThreads_, int kFirstThread = 0, int kSumUnroll = 1>
struct Epilogue {
  using Element = Element_;
  static constexpr int kBlockM = kBlockM_, kBlockN = kBlockN_, kNThreads = kNThreads_;
  // This thread's index among the epilogue's threads.
  __device__ __forceinline__ static int thread() { return static_cast<int>(threadIdx.x) - kFirstThread; }
  static constexpr int kLd = kBlockN + 4;  // the staging tile's row stride, in floats
  using SmemLayoutC = Layout<Shape<Int<kBlockM>, Int<kBlockN>>, Stride<Int<kLd>, _1>>;

  struct SharedStorage {
    array_aligned<float, kBlockM * kLd> tile;
  };

  // Columns of h one GEMM0 tile makes: half its b0 rows when gated (gate and up), else all.
  __device__ __forceinline__ static int h_cols_per_tile(const GemmPairParams& p) {
    return p.activation == static_cast<int>(Activation::kSwiGLU) ? kBlockN / 2 : kBlockN;
  }

  // Stages the accumulators (partitioned like TiledMma's C) as the row-major float32 tile, which
  // every thread of `barrier` may read once this returns.
  template <typename TiledMma, typename Acc, typename Barrier>
  __device__ __forceinline__ static float* stage(const Acc& acc, SharedStorage& storage, Barrier barrier) {
    Tensor sC = make_tensor(make_smem_ptr(storage.tile.data()), SmemLayoutC{});
    TiledMma tiled_mma;
    Tensor tCsC = tiled_mma.get_thread_slice(thread()).partition_C(sC);
    copy(acc, tCsC);
    barrier.sync();
    return storage.tile.data();
  }

  // h[row0 + r, col0 + c] for the tile's valid rows. Gated: the tile holds `half` gate columns then
  // `half` up columns (half = 64, less in the last tile); otherwise `width` plain columns.
  __device__ __forceinline__ static void store_h(const float* sC, const GemmPairParams& p, int row0, int rows,
                                                 int tile_n) {
    const Activation act = static_cast<Activation>(p.activation);
    const bool gated = act == Activation::kSwiGLU;
    const int h_per_tile = h_cols_per_tile(p);
    const int col0 = tile_n * h_per_tile;
    const int width = min(h_per_tile, p.h_width - col0);  // a multiple of 8 (h_width is)
    const int vecs_per_row = h_per_tile / 8;
    Element* h = static_cast<Element*>(p.h);
    for (int i = thread(); i < kBlockM * vecs_per_row; i += kNThreads) {
      const int r = i / vecs_per_row, c = (i % vecs_per_row) * 8;
      if (r >= rows || c >= width) continue;
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float x = sC[r * kLd + c + j];
        v[j] = gated ? silu(x) * sC[r * kLd + width + c + j] : act == Activation::kGeLU ? gelu(x) : x;
      }
      *reinterpret_cast<uint4*>(h + static_cast<int64_t>(row0 + r) * p.h_width + col0 + c) = pack8<Element>(v);
    }
  }

  __device__ __forceinline__ static void store_out(const float* sC, const GemmPairParams& p, int row0, int rows,
                                                   int tile_n) {
    constexpr int kVecs = kBlockN / 8;
    const int col0 = tile_n * kBlockN;
    const int width = min(kBlockN, p.n1 - col0);
    Element* out = static_cast<Element*>(p.out);
    for (int i = thread(); i < kBlockM * kVecs; i += kNThreads) {
      const int r = i / kVecs, c = (i % kVecs) * 8;
      if (r >= rows || c >= width) continue;
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = sC[r * kLd + c + j];
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row0 + r) * p.n1 + col0 + c) = pack8<Element>(v);
    }
  }

  // The register epilogue (SM90; a tile not split along K): the tile stored straight from the
  // accumulators, with no staging tile, so that the mainloop's shared memory is free for the next
  // tile's loads while these stores run. A wgmma accumulator fragment holds, in each of its
  // warp group's 64-row slabs (128 rows apart when two warp groups split the tile's rows), a
  // thread's 2 adjacent columns of every 8-column group in both 8-row halves of its warp's 16 rows:
  // ((2 columns, 2 halves, kBlockN / 8 groups), slabs, 1). Groups g and g + kBlockN / 16 are
  // kBlockN / 2 columns apart in the same thread: SwiGLU's pairing in a full-width tile (gate
  // column c, up column kBlockN / 2 + c), so the activation needs no exchange between threads.
  // Each store is one 16-bit pair; a quad of threads writes 16 contiguous bytes of a row.
  template <typename TiledMma, typename Acc>
  __device__ __forceinline__ static void store_h_registers(const Acc& acc, const GemmPairParams& p, int row0,
                                                           int rows, int tile_n) {
    const Activation act = static_cast<Activation>(p.activation);
    const int h_per_tile = h_cols_per_tile(p);
    const int col0 = tile_n * h_per_tile;
    const auto [r0, c0] = thread_origin<TiledMma>();
    const int64_t ld = p.h_width;
    Element* h = static_cast<Element*>(p.h) + (row0 + r0) * ld + col0 + c0;
    const int rows_left = rows - r0;
    // SwiGLU: no column bound, since the caller's tile is full width (epilogue_in_registers):
    // h_per_tile columns, each with its up column.
    if (act == Activation::kSwiGLU) {
#if CUTE_OPS_GEMM_PAIR_SM90_H_STORE_16B
      if (ld % 8 == 0) {  // h's rows 16-byte aligned (h from at::empty; a tile's columns start at 64c)
        static_assert(kBlockN / 16 == 8, "a tile's 64 h columns: 8 groups of 8");
        Element* const h_row = h - c0;  // this thread's row at the tile's first column
        uint32_t pairs[8];              // this lane's pair of each column group of the current row
        for_each_pair<TiledMma, kBlockN / 16>(acc, [&](int dr, int dc, float g0, float g1, float u0, float u1) {
          const int group = dc / 8;  // a constant once unrolled: groups come 0..7 for each row
          pairs[group] = pack2<Element>(silu(g0) * u0, silu(g1) * u1);
          if (group == 7) store_row_16b(pairs, h_row + dr * ld, dr < rows_left);
        });
        return;
      }
#endif
      for_each_pair<TiledMma, kBlockN / 16>(acc, [&](int dr, int dc, float g0, float g1, float u0, float u1) {
        if (dr < rows_left) store2(h + dr * ld + dc, silu(g0) * u0, silu(g1) * u1);
      });
    } else {
      const bool is_gelu = act == Activation::kGeLU;
      const int cols_left = min(h_per_tile, p.h_width - col0) - c0;
      for_each_pair<TiledMma, 0>(acc, [&](int dr, int dc, float x0, float x1, float, float) {
        if (dr < rows_left && dc < cols_left) {
          store2(h + dr * ld + dc, is_gelu ? gelu(x0) : x0, is_gelu ? gelu(x1) : x1);
        }
      });
    }
  }

  // With the store warp (h_store_sm90.h): SwiGLU's h of a full-width GEMM0 tile written into sH,
  // the (kBlockM, kBlockN / 2) staging buffer in shared memory with the 128-byte swizzle, instead
  // of store_h_registers' global stores; the same pairs, so the same bits. Rows past m are written
  // too: the TMA store that takes the buffer out clips them. The swizzle repeats every 8 rows of
  // 128 bytes and a thread's rows are r0 plus multiples of 8 (8-row halves, 64-row slabs), so the
  // address of each 8-column group at row r0 serves every row: 8 registers, not an address a
  // store (which spilled).
  template <typename TiledMma, typename Acc, typename SmemTensor>
  __device__ __forceinline__ static void stage_h_registers(const Acc& acc, SmemTensor&& sH) {
    constexpr int kGroups = kBlockN / 16;                                // h's 8-column groups
    constexpr int kRowBytes = kBlockN / 2 * static_cast<int>(sizeof(Element));  // 128
    const auto [r0, c0] = thread_origin<TiledMma>();
    uint32_t group_at_r0[kGroups];
    CUTE_UNROLL
    for (int g = 0; g < kGroups; ++g) group_at_r0[g] = cute::cast_smem_ptr_to_uint(&sH(r0, c0 + 8 * g));
    for_each_pair<TiledMma, kGroups>(acc, [&](int dr, int dc, float g0, float g1, float u0, float u1) {
      const uint32_t pair = pack2<Element>(silu(g0) * u0, silu(g1) * u1);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(group_at_r0[dc / 8] + dr * kRowBytes), "r"(pair) : "memory");
    });
  }

  template <typename TiledMma, typename Acc>
  __device__ __forceinline__ static void store_out_registers(const Acc& acc, const GemmPairParams& p, int row0,
                                                             int rows, int tile_n) {
    const int col0 = tile_n * kBlockN;
    const auto [r0, c0] = thread_origin<TiledMma>();
    const int64_t ld = p.n1;
    Element* out = static_cast<Element*>(p.out) + (row0 + r0) * ld + col0 + c0;
    const int rows_left = rows - r0, cols_left = min(kBlockN, p.n1 - col0) - c0;
#if CUTE_OPS_GEMM_PAIR_SM90_OUT_STORE_16B
    if (ld % 8 == 0 && col0 + kBlockN <= p.n1) {  // a full-width tile, its rows 16-byte aligned
      Element* const out_row = out - c0;            // this thread's row at the tile's first column
      uint32_t pairs[kBlockN / 8];
      for_each_pair<TiledMma, 0>(acc, [&](int dr, int dc, float x0, float x1, float, float) {
        const int group = dc / 8;  // a constant once unrolled: 0 .. kBlockN / 8 - 1 for each row
        pairs[group] = pack2<Element>(x0, x1);
        if (group == kBlockN / 8 - 1) store_row_16b(pairs, out_row + dr * ld, dr < rows_left);
      });
      return;
    }
#endif
    for_each_pair<TiledMma, 0>(acc, [&](int dr, int dc, float x0, float x1, float, float) {
      if (dr < rows_left && dc < cols_left) store2(out + dr * ld + dc, x0, x1);
    });
  }

  // The folded split-K of GEMM1 (SM90, CUTE_OPS_GEMM_PAIR_SM90_FOLD_SPLITS): an output tile's
  // K-splits add themselves, in split order, to one running sum kept in `partials1`, straight
  // from the accumulators. Split s waits until splits 0..s-1 are in it (its counter `*folded`
  // reaches s, or 2s under kPairLast below; released by split s-1), reads it and adds its own
  // accumulators (running + acc: ((p0 + p1) + p2) + ..., the association sum_partials uses,
  // whatever order the splits end in); then a split other than the last stores the new running
  // sum in place and counts it. Returns true in the last split, whose accumulators then hold the
  // tile's sum for the output's store.
  // So the last split reads one running sum, in one round trip, instead of publishing its own
  // partial and then reading every split's (the launch's tail: docs/perf-notes.md, session 61).
  // The running sum is laid out in the accumulators' own order, so that a thread reads back what
  // it would write and a warp's 16-byte accesses are 512 contiguous bytes: 16-row groups of the
  // tile (a warp's rows in one 64-row slab), each [kBlockN / 8 column groups][32 lanes] float4,
  // group g of a tile at running_tile + g * 16 * kBlockN floats. Only the groups holding valid
  // rows are read or written, so a tile of `rows` rows needs round_up(rows, 16) * kBlockN floats.
  __device__ __forceinline__ static float* running_tile(const GemmPairParams& p, int m_block, int n_tile) {
    const int row0 = m_block * kBlockM, rows16 = (min(kBlockM, p.m - row0) + 15) / 16 * 16;
    const int64_t n_pad = static_cast<int64_t>(p.tiles1) * kBlockN;
    return p.partials1 + row0 * n_pad + static_cast<int64_t>(n_tile) * rows16 * kBlockN;
  }
  // The same tile in the plane after the running sums' (fold_split's kPairLast partial): the host
  // sizes partials1 for two planes of round_up(m, 16) rows from 3 splits (make_params).
  __device__ __forceinline__ static float* pair_tile(const GemmPairParams& p, int m_block, int n_tile) {
    const int64_t plane = static_cast<int64_t>((p.m + 15) / 16 * 16) * p.tiles1 * kBlockN;
    return running_tile(p, m_block, n_tile) + plane;
  }

  // `landing`: the staging tile's shared memory, free for this tile (the caller's to ensure: no
  // TMA load of a later tile may target it). The running sum is copied into it by cp.async, every
  // float4 of a thread at once, so the read is one round trip without holding registers beside
  // the accumulators (a register copy of 4 float4 at a time already spilled at 256 rows, where
  // the consumers' code gets 168 registers). Each thread reads back only its own copies, so no
  // barrier is needed between the copies and the adds.
  //
  // kPairLast, with 3 splits or more: the next-to-last split a = splits - 2 leaves its fold to the
  // last, so that the two do not run one after the other at the launch's end (their loops tend
  // to end together: docs/perf-notes.md, session 62). Split a does not wait: it stores its own
  // accumulators at `pair` (the same layout) and counts 1. The last split waits for both the
  // running sum of splits 0..a-1 and that partial, and adds (running + p_a) + p_last: the same
  // association, so the same bits. The counter then counts 2 a fold, so that its parity tells the
  // partial apart. The partial is read into registers beside the accumulators: one float4 a
  // vector, so kPairLast needs a thread's vectors to be few (64- and 128-row tiles: 16).
  template <typename TiledMma, bool kPairLast = false, typename Acc, typename Barrier>
  __device__ __forceinline__ static bool fold_split(Acc& acc, float* running, float* pair, int* folded, int split,
                                                    int splits, int rows, SharedStorage& landing, Barrier barrier) {
    using AccLayout = typename Acc::layout_type;
    static_assert(decltype(size<0, 2>(AccLayout{}))::value == kBlockN / 8 &&
                      decltype(size<2>(AccLayout{}))::value == 1,
                  "a wgmma accumulator fragment of one atom across the tile's columns");
    constexpr int kSlabs = decltype(size<1>(AccLayout{}))::value;
    constexpr int kGroups = kBlockN / 8;
    constexpr int kVecs = kSlabs * kGroups;  // float4 a thread
    static_assert(kVecs * kNThreads * 4 <= kBlockM * kLd, "the running sum fits the staging tile");
    // Each slab's 16-row group is this thread's first row's plus the slab's offset, taken from
    // thread 0's partition (a constant, a multiple of 16 rows), so every address is one pointer plus
    // an immediate.
    Tensor cC = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor t0cC = TiledMma{}.get_thread_slice(0).partition_C(cC);
    auto slab_rows = [&](int slab) {  // the slab's first row less the first slab's
      return static_cast<int>(get<0>(t0cC(make_coord(make_coord(0, 0, 0), slab, 0)))) -
             static_cast<int>(get<0>(t0cC(0)));
    };
    const int first_row = get<0>(thread_origin<TiledMma>()) / 16 * 16;  // of this thread's 16-row group
    const int rows_left = rows - first_row;
    float4* const base = reinterpret_cast<float4*>(running) + first_row / 16 * kGroups * 32 + thread() % 32;
    auto vec = [&](int slab, int g) { return base + (slab_rows(slab) / 16 * kGroups + g) * 32; };
    auto valid = [&](int slab) { return slab_rows(slab) < rows_left; };
    auto value = [&](int slab, int g, int i) -> float& {  // i: (column pair, row half) of the float4
      return acc(make_coord(make_coord(i % 2, i / 2, g), slab, 0));
    };
    auto pair_vec = [&](int slab, int g) {  // vec's place in the kPairLast partial's plane
      return reinterpret_cast<float4*>(pair) + (vec(slab, g) - reinterpret_cast<float4*>(running));
    };
    auto store_values = [&](auto&& place) {  // this thread's valid vectors of acc at place(slab, g)
      CUTE_UNROLL
      for (int slab = 0; slab < kSlabs; ++slab) {
        if (!valid(slab)) continue;
        CUTE_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          __stcg(place(slab, g), make_float4(value(slab, g, 0), value(slab, g, 1), value(slab, g, 2), value(slab, g, 3)));
        }
      }
    };
    constexpr int kFold = kPairLast ? 2 : 1;  // what a fold adds to the counter
    const bool pair_last = kPairLast && splits >= 3;
    if constexpr (kPairLast) {
      static_assert(kVecs <= 16, "kPairLast holds the partial in registers beside the accumulators");
      if (pair_last && split == splits - 2) {  // its own partial, for the last split to add
        store_values(pair_vec);
        signal(folded, barrier, 1);
        return false;
      }
    }
    if (split > 0) {
      const bool last_of_pair = pair_last && split == splits - 1;
      // Also every consumer thread is done with the staging tile's earlier use. Splits 0..split-1
      // are in the running sum (with last_of_pair: splits 0..split-2, and split - 1's partial).
      wait_at_least(folded, last_of_pair ? kFold * (split - 1) + 1 : kFold * split, barrier);
      float4* const mine = reinterpret_cast<float4*>(landing.tile.data()) + thread();
      CUTE_UNROLL
      for (int slab = 0; slab < kSlabs; ++slab) {
        if (!valid(slab)) continue;
        CUTE_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          SM80_CP_ASYNC_CACHEGLOBAL<float4>::copy(*vec(slab, g), mine[(slab * kGroups + g) * kNThreads]);
        }
      }
      cp_async_fence();
      if constexpr (kPairLast) {
        if (last_of_pair) {  // (running + p_a) + p_last
          // p_a in registers, half a thread's vectors at a time (all at once spilled at 64 rows):
          // the first half's loads in flight with the running sum's copies.
          constexpr int kHalf = (kVecs + 1) / 2;
          CUTE_UNROLL
          for (int half = 0; half < 2; ++half) {
            float4 partial[kHalf];
            CUTE_UNROLL
            for (int v = half * kHalf; v < min(kVecs, (half + 1) * kHalf); ++v) {
              if (valid(v / kGroups)) {
                partial[v - half * kHalf] = __ldcg(pair_vec(v / kGroups, v % kGroups));
              }
            }
            if (half == 0) cp_async_wait<0>();
            CUTE_UNROLL
            for (int v = half * kHalf; v < min(kVecs, (half + 1) * kHalf); ++v) {
              if (!valid(v / kGroups)) continue;
              const int slab = v / kGroups, g = v % kGroups;
              const float4 prev = mine[v * kNThreads], q = partial[v - half * kHalf];
              value(slab, g, 0) = (prev.x + q.x) + value(slab, g, 0), value(slab, g, 1) = (prev.y + q.y) + value(slab, g, 1);
              value(slab, g, 2) = (prev.z + q.z) + value(slab, g, 2), value(slab, g, 3) = (prev.w + q.w) + value(slab, g, 3);
            }
          }
          return true;
        }
      }
      cp_async_wait<0>();
      CUTE_UNROLL
      for (int slab = 0; slab < kSlabs; ++slab) {
        if (!valid(slab)) continue;
        CUTE_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          const float4 prev = mine[(slab * kGroups + g) * kNThreads];
          value(slab, g, 0) = prev.x + value(slab, g, 0), value(slab, g, 1) = prev.y + value(slab, g, 1);
          value(slab, g, 2) = prev.z + value(slab, g, 2), value(slab, g, 3) = prev.w + value(slab, g, 3);
        }
      }
    }
    if (split == splits - 1) return true;
    store_values(vec);
    signal(folded, barrier, kFold);  // split + 1 splits in the running sum (kFold a split)
    return false;
  }

  // Split-K of GEMM kGemm (the params' members suffixed kGemm: partials, arrived, tiles, splits).
  // Publishes this split's part of the tile (rows [row0, row0 + rows), columns [col0, col0 +
  // width) of the GEMM's output) and counts its arrival at the tile's counter. Returns true in the
  // CTA whose split arrived last, with the staging tile replaced by the sum of every split's
  // partial, added in split order; false in the others, which are then done with the tile.
  template <int kGemm, typename Barrier>
  __device__ __forceinline__ static bool reduce_splits(float* sC, const GemmPairParams& p, int m_block, int tile_n,
                                                       int split, int row0, int rows, int col0, int width,
                                                       Barrier barrier) {
    static_assert(kGemm == 0 || kGemm == 1);
    // References to the GEMM's members, read where they are used: the compiler's schedule of this
    // code depends on the order of those reads (copies made up front changed the SASS).
    const int& n = kGemm == 0 ? p.n0 : p.n1;  // the output's columns: the partials' row stride
    float* const& partials = kGemm == 0 ? p.partials0 : p.partials1;
    int* const& arrived = kGemm == 0 ? p.arrived0 : p.arrived1;
    const int& tiles = kGemm == 0 ? p.tiles0 : p.tiles1;
    const int& splits = kGemm == 0 ? p.splits0 : p.splits1;
    const int64_t split_stride = static_cast<int64_t>(p.m) * n;
    if (!publish_partial(sC, partials, split_stride, n, row0, rows, col0, width, split,
                         arrived + m_block * tiles + tile_n, splits, barrier)) {
      return false;
    }
    sum_partials(sC, partials, split_stride, n, row0, rows, col0, width, splits, barrier);
    return true;
  }

 private:
  __device__ __forceinline__ static void store2(Element* dst, float lo, float hi) {
    *reinterpret_cast<uint32_t*>(dst) = pack2<Element>(lo, hi);
  }

  // One row of a tile from the registers in 16-byte stores (CUTE_OPS_GEMM_PAIR_SM90_H_STORE_16B,
  // _OUT_STORE_16B). In the wgmma accumulator layout a quad (lanes 4i .. 4i + 3) holds one row,
  // lane q columns 2q, 2q + 1 of each 8-column group as one packed 32-bit pair (`pairs`, one a
  // group). Four rounds of shuffles within the quad hand lane q groups [kPer q, kPer (q + 1)),
  // i.e. columns [8 kPer q, 8 kPer (q + 1)) of the row: in round k lane q reads lane (q + k) % 4,
  // which sends the pairs that reader needs. The pairs are the 4-byte path's, so the bits are
  // too. row: the row at the tile's first column. Every lane of the quad takes part in the
  // shuffles; only the stores depend on `valid` (the same in the quad: one row).
  template <int kGroups>
  __device__ __forceinline__ static void store_row_16b(const uint32_t (&pairs)[kGroups], Element* row, bool valid) {
    static_assert(kGroups % 4 == 0);
    constexpr int kPer = kGroups / 4;  // groups a lane stores
    const int lane = static_cast<int>(threadIdx.x) % 32, q = lane % 4, quad0 = lane - q;
    uint32_t got[kPer][4];  // got[j][k]: lane (q + k) % 4's pair of group kPer q + j
    CUTE_UNROLL
    for (int k = 0; k < 4; ++k) {
      const int reader = (q - k) & 3;  // the lane that reads this one in round k
      CUTE_UNROLL
      for (int j = 0; j < kPer; ++j) {
        const uint32_t send = reader == 0   ? pairs[j]
                              : reader == 1 ? pairs[kPer + j]
                              : reader == 2 ? pairs[2 * kPer + j]
                                            : pairs[3 * kPer + j];
        got[j][k] = __shfl_sync(0xffffffffu, send, quad0 | ((q + k) & 3));
      }
    }
    if (!valid) return;
    CUTE_UNROLL
    for (int j = 0; j < kPer; ++j) {
      auto from = [&](int lane_s) {  // lane_s's pair of group kPer q + j: round (lane_s - q) % 4's
        const int k = (lane_s - q) & 3;
        return k == 0 ? got[j][0] : k == 1 ? got[j][1] : k == 2 ? got[j][2] : got[j][3];
      };
      *reinterpret_cast<uint4*>(row + 8 * (kPer * q + j)) = make_uint4(from(0), from(1), from(2), from(3));
    }
  }

  // The tile coordinates (row, column) of this thread's first accumulator.
  template <typename TiledMma>
  __device__ __forceinline__ static cute::tuple<int, int> thread_origin() {
    Tensor cC = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});
    const auto rc = TiledMma{}.get_thread_slice(thread()).partition_C(cC)(0);
    return {static_cast<int>(get<0>(rc)), static_cast<int>(get<1>(rc))};
  }

  // Calls f(dr, dc, x[c], x[c + 1], x[c + d], x[c + d + 1]) for each pair of adjacent columns
  // (c, c + 1) of this thread's accumulators, (dr, dc) its offset from thread_origin() and d = 8 *
  // kPairGroups columns: with kPairGroups > 0 only for the pairs of the first kPairGroups column
  // groups, with 0 for every pair (the last two arguments then repeat the first two). The offsets
  // are the same in every thread (the layout is thread part plus value part, with no carry between
  // rows and columns): taken from thread 0's partition, they fold into constants, so a store's
  // address is one of a few row pointers plus an immediate.
  template <typename TiledMma, int kPairGroups, typename Acc, typename F>
  __device__ __forceinline__ static void for_each_pair(const Acc& acc, F&& f) {
    using AccLayout = typename Acc::layout_type;
    static_assert(decltype(size<0, 0>(AccLayout{}))::value == 2 && decltype(size<0, 1>(AccLayout{}))::value == 2 &&
                      decltype(size<0, 2>(AccLayout{}))::value == kBlockN / 8 &&
                      decltype(size<2>(AccLayout{}))::value == 1,
                  "a wgmma accumulator fragment of one atom across the tile's columns");
    constexpr int kSlabs = decltype(size<1>(AccLayout{}))::value;
    constexpr int kGroups = kPairGroups > 0 ? kPairGroups : kBlockN / 8;
    Tensor cC = make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor t0cC = TiledMma{}.get_thread_slice(0).partition_C(cC);  // thread 0's (row, col) of each value
    const int r00 = get<0>(t0cC(0)), c00 = get<1>(t0cC(0));
    CUTE_UNROLL
    for (int slab = 0; slab < kSlabs; ++slab) {
      CUTE_UNROLL
      for (int half = 0; half < 2; ++half) {
        CUTE_UNROLL
        for (int g = 0; g < kGroups; ++g) {
          const auto x0 = make_coord(make_coord(0, half, g), slab, 0);
          const auto x1 = make_coord(make_coord(1, half, g), slab, 0);
          const auto y0 = make_coord(make_coord(0, half, g + kPairGroups), slab, 0);
          const auto y1 = make_coord(make_coord(1, half, g + kPairGroups), slab, 0);
          const auto rc = t0cC(x0);
          f(static_cast<int>(get<0>(rc)) - r00, static_cast<int>(get<1>(rc)) - c00, acc(x0), acc(x1), acc(y0),
            acc(y1));
        }
      }
    }
  }

  // Writes this split's float32 tile to its slice of `partials` (split-major: split * split_stride
  // + row * ld + col), then counts its arrival on `arrived`. Returns true in the CTA whose split
  // arrived last; there every split's partial is visible.
  template <typename Barrier>
  __device__ __forceinline__ static bool publish_partial(const float* sC, float* partials, int64_t split_stride,
                                                         int64_t ld, int row0, int rows, int col0, int width, int split,
                                                         int* arrived, int splits, Barrier barrier) {
    constexpr int kVecs = kBlockN / 4;
    float* dst = partials + split * split_stride + row0 * ld + col0;
    for (int i = thread(); i < kBlockM * kVecs; i += kNThreads) {
      const int r = i / kVecs, c = (i % kVecs) * 4;
      if (r >= rows || c >= width) continue;
      *reinterpret_cast<float4*>(dst + r * ld + c) =
          make_float4(sC[r * kLd + c], sC[r * kLd + c + 1], sC[r * kLd + c + 2], sC[r * kLd + c + 3]);
    }
    __shared__ int is_last;
    barrier.sync();  // every partial store of this CTA is issued
    if (barrier.is_leader()) {
      // acq_rel: publishes this split's partial (release, cumulative over the barrier) and, for the
      // last split, makes the others' partials visible (acquire).
      is_last = fetch_add_acq_rel(arrived, 1) == splits - 1;
    }
    barrier.sync();
    return is_last;
  }

  // The staging tile becomes the sum of every split's partial, added in split order.
  // This runs after the tile's last split, on the launch's critical path (at decode sizes the
  // last GEMM1 tiles' sums are the launch's tail), and it is latency-bound: a thread's loads are
  // L2 round trips. So each thread issues the loads of kUnroll of its vectors for kBatch splits
  // before it sums any: one round trip per kUnroll vectors and kBatch splits. (With one vector at
  // a time the SM90 kernel's last sums took 7 us at M = 16 and 20 us at M = 64-128 on an H200, 16
  // round trips a thread: docs/perf-notes.md, session 38. The automatic splits at those M are 3
  // or 5, hence a batch of 5 where the unroll already multiplies the registers.)
  template <typename Barrier>
  __device__ __forceinline__ static void sum_partials(float* sC, const float* partials, int64_t split_stride,
                                                      int64_t ld, int row0, int rows, int col0, int width, int splits,
                                                      Barrier barrier) {
    constexpr int kVecs = kBlockN / 4;
    constexpr int kPerThread = (kBlockM * kVecs + kNThreads - 1) / kNThreads;
    constexpr int kUnroll = kPerThread < kSumUnroll ? kPerThread : kSumUnroll;
    constexpr int kBatch = kUnroll == 1 ? 8 : kUnroll <= 4 ? 5 : 3;  // splits loaded before they are summed
    const float* base = partials + row0 * ld + col0;
    for (int i0 = thread(); i0 < kBlockM * kVecs; i0 += kUnroll * kNThreads) {
      bool valid[kUnroll];
      int64_t offset[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * kNThreads, r = i / kVecs, c = (i % kVecs) * 4;
        valid[u] = i < kBlockM * kVecs && r < rows && c < width;
        offset[u] = r * ld + c;
      }
      float4 sum[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s0 = 0; s0 < splits; s0 += kBatch) {
        float4 v[kUnroll][kBatch];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (int j = 0; j < kBatch; ++j) {
            if (valid[u] && s0 + j < splits) {
              v[u][j] = __ldcg(reinterpret_cast<const float4*>(base + offset[u] + (s0 + j) * split_stride));
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (int j = 0; j < kBatch; ++j) {
            if (valid[u] && s0 + j < splits) {
              sum[u].x += v[u][j].x, sum[u].y += v[u][j].y, sum[u].z += v[u][j].z, sum[u].w += v[u][j].w;
            }
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (!valid[u]) continue;
        const int i = i0 + u * kNThreads, r = i / kVecs, c = (i % kVecs) * 4;
        float* dst = sC + r * kLd + c;
        dst[0] = sum[u].x, dst[1] = sum[u].y, dst[2] = sum[u].z, dst[3] = sum[u].w;
      }
    }
    barrier.sync();
  }
};

}  // namespace cute_ops::gemm_pair
