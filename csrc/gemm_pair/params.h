#pragma once
// make_params: the GemmPairParams of a call and the workspace it needs, host only and torch-free,
// so that the op (gemm_pair_op.cpp) and the profiling tool (perf/tools/gemm_pair_timeline.cu)
// launch the same thing: the geometry (K-splits picked as tile_order.h's rules say, unless given),
// every size and split field of the params, the layout of the counters, and the sizes of h and of
// the split-K partials. The caller allocates from those sizes, then bind_workspace points the
// params at its buffers.
#include <algorithm>
#include <array>
#include <cstdint>

#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/tile_order.h"

namespace cute_ops::gemm_pair {

// What a call asks for, and the launch's capacity that the automatic K-splits depend on.
struct Problem {
  int64_t m = 0, k = 0, n0 = 0, n1 = 0;
  int64_t lda = 0;  // a's row stride, in elements
  Activation activation = Activation::kSwiGLU;
  bool tile_sync = true;  // granularity "tile" (false: "row")
  bool is_bf16 = false;
  int block_m = 0;                       // the tile config (gemm_pair_supports_block_m)
  int64_t split_k0 = -1, split_k1 = -1;  // columns a K-split reads; -1: automatic, 0 or >= K: no split
  int64_t slots = 1;                     // CTA slots of the launch: SMs x ctas_per_sm
  int ctas_per_sm = 1;                   // of the tile config (gemm_pair_ctas_per_sm)
};

// The counters, int32 from common/arrival_counters.h: zero when a launch starts, and left zero by
// it (no memset before a launch):
//   [0]                the ticket
//   [1]                the second launch's ticket (the two-launch control)
//   [2], [3]           CTAs finished, of the first / second launch (kExitedAfterTicket after its
//                      ticket): the last resets the ticket, its own count, the ready counters
//                      and the split arrivals (tile_sync.h, retire)
//   [ready, ...)       GEMM0 tiles finished: one per row block, or per (row block, GEMM1 K-split)
//                      at tile granularity (the kernel's ready_index)
//   [arrived[i], ...)  GEMM i's K-splits finished, one per output tile (only when it is split)
struct CounterLayout {
  int64_t ready = 2 + kExitedAfterTicket;
  int64_t arrived[2] = {0, 0};
  int64_t size = 0;  // int32 counters in all
};

struct Plan {
  Geometry geometry;  // tile sizes and the chosen K-splits (also the order table's key)
  // Every field but the pointers: a, b0, b1, h, out and order are the caller's; the counters and
  // partials are set by bind_workspace.
  GemmPairParams params{};
  CounterLayout counters;
  int64_t partials[2] = {0, 0};  // float32 elements of each GEMM's split-K partials (0: not split)
  int64_t h_elems = 0;           // elements of h, [m, h_width]
  int64_t tickets[2] = {0, 0};   // GEMM0's and GEMM1's tiles: the order table lists GEMM0's first
};

inline Plan make_params(const Problem& pr) {
  Plan plan;
  Geometry& g = plan.geometry;
  g.m = pr.m, g.k = pr.k, g.n0 = pr.n0, g.n1 = pr.n1, g.gated = pr.activation == Activation::kSwiGLU;
  g.block_m = pr.block_m;
  g.block_n0 = g.block_n1 = kGemmPairBlockN;
  g.split_k0 = pr.split_k0 < 0 ? auto_split_k0(g, pr.slots, pr.ctas_per_sm) : pr.split_k0;
  if (g.split_k0 >= g.k) g.split_k0 = 0;  // one split
  g.split_k1 = pr.split_k1 < 0 ? auto_split_k1(g, pr.slots) : pr.split_k1;
  if (g.split_k1 >= g.h_width()) g.split_k1 = 0;  // one split

  const int64_t splits[2] = {g.splits0(), g.splits()};
  const int64_t tiles[2] = {g.n0_tiles(), g.n1_tiles()};
  const int64_t split_k[2] = {g.k0_cols(), g.k1_cols()};
  const int64_t n[2] = {g.n0, g.n1};
  CounterLayout& c = plan.counters;
  int64_t next = c.ready + g.m_blocks() * (pr.tile_sync ? splits[1] : 1);
  for (int i = 0; i < 2; ++i) {
    c.arrived[i] = next;
    if (splits[i] > 1) next += g.m_blocks() * tiles[i];
    plan.partials[i] = splits[i] > 1 ? splits[i] * g.m * n[i] : 0;
    // The SM90 kernel's folded GEMM1 splits keep one running sum, 16-row groups of whole tiles
    // (Epilogue::running_tile): round_up(m, 16) rows of the tiles' columns; from 3 splits a second
    // plane like it, for the next-to-last split's partial where a build pairs the last two splits
    // (CUTE_OPS_GEMM_PAIR_SM90_FOLD_PAIR, a device-code knob this host code cannot see).
    if (i == 1 && splits[i] > 1) {
      const int64_t planes = splits[i] >= 3 ? 2 : 1;
      plan.partials[i] = std::max(plan.partials[i], planes * ceil_div(g.m, 16) * 16 * tiles[i] * g.block_n1);
    }
    plan.tickets[i] = g.m_blocks() * tiles[i] * splits[i];
  }
  c.size = next;
  plan.h_elems = g.m * g.h_width();

  GemmPairParams& p = plan.params;
  p.tiles0 = static_cast<int>(tiles[0]), p.tiles1 = static_cast<int>(tiles[1]);
  p.splits0 = static_cast<int>(splits[0]), p.split_k0 = static_cast<int>(split_k[0]);
  p.splits1 = static_cast<int>(splits[1]), p.split_k1 = static_cast<int>(split_k[1]);
  p.lda = pr.lda;
  p.m = static_cast<int>(g.m), p.k = static_cast<int>(g.k), p.n0 = static_cast<int>(g.n0), p.n1 = static_cast<int>(g.n1);
  p.h_width = static_cast<int>(g.h_width());
  p.num_tiles = static_cast<int>(g.num_tiles());
  p.activation = static_cast<int>(pr.activation);
  p.tile_sync = pr.tile_sync;
  p.wait = true;
  p.is_bf16 = pr.is_bf16;
  return plan;
}

// Points the params at the caller's workspace: `counters` holds plan.counters.size int32 (zero,
// and left zero by the launches), partials[i] plan.partials[i] floats (unused, may be null, when 0).
inline void bind_workspace(Plan& plan, int* counters, float* const (&partials)[2]) {
  GemmPairParams& p = plan.params;
  p.ticket = counters;
  p.ready = counters + plan.counters.ready;
  p.arrived0 = p.splits0 > 1 ? counters + plan.counters.arrived[0] : nullptr;
  p.arrived1 = p.splits1 > 1 ? counters + plan.counters.arrived[1] : nullptr;
  p.partials0 = p.splits0 > 1 ? partials[0] : nullptr;
  p.partials1 = p.splits1 > 1 ? partials[1] : nullptr;
}

// The two-launch control: the same tiles as two launches ordered by the stream, GEMM0's tickets
// then GEMM1's (the order must list them so: the sequential policy's does). The second launch
// takes its tickets from counter [1] and does not wait for h: the stream orders it after GEMM0.
inline std::array<GemmPairParams, 2> two_launch_params(const Plan& plan) {
  std::array<GemmPairParams, 2> launches{plan.params, plan.params};
  launches[0].num_tiles = static_cast<int>(plan.tickets[0]);
  launches[1].order = plan.params.order + plan.tickets[0];
  launches[1].num_tiles = static_cast<int>(plan.tickets[1]);
  launches[1].ticket = plan.params.ticket + 1;
  launches[1].wait = false;
  return launches;
}

}  // namespace cute_ops::gemm_pair
