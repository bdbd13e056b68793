#pragma once
// The tile order of gemm_pair, built on the host: which GEMM, tile and K-split each ticket names.
// This is the C++ twin of cute_ops/gemm_pair_schedule.py (the tested model, with the policies'
// rationale); tests/test_gemm_pair_schedule.py checks that both build the same table for every
// policy, granularity and shape it covers. Host code only: torch_bindings.cpp exposes it to the
// CPU build as `gemm_pair_order`, and the CUDA op uploads it once per shape.
#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gate_up_layout.h"
#include "common/kernel_arch.h"

namespace cute_ops {

// Every tile config's width, both GEMMs. A gated GEMM0 tile makes half as many h columns, which
// is the block of pack_gate_up's interleave (64 gate rows, then the 64 matching up rows), so the
// packing depends on it.
constexpr int kGemmPairBlockN = 128;
// A SwiGLU GEMM0 tile is one pack_gate_up block: its gate rows, then the same up rows.
static_assert(kGemmPairBlockN == 2 * kGateUpBlock, "a GEMM0 tile must hold one gate/up block");

}  // namespace cute_ops

namespace cute_ops::gemm_pair {

enum class Policy : int { kSequential = 0, kRowInterleaved = 1, kOverlap = 2 };
enum class Activation : int { kSwiGLU = 0, kGeLU = 1, kNone = 2 };
// Which kernels a call may run: kAuto, the op's choice for the device and tile config
// (gemm_pair_op.cpp's kernel_kind); or one kind only, for tests and A/B runs.
using Arch = KernelArch;
// The sm90 kernels load K in whole tiles of this many columns: a K-split must be a multiple.
constexpr int64_t kSm90SplitStep = 64;

inline Policy parse_policy(const std::string& s) {
  if (s == "sequential") return Policy::kSequential;
  if (s == "row_interleaved") return Policy::kRowInterleaved;
  if (s == "overlap") return Policy::kOverlap;
  throw std::invalid_argument("gemm_pair: policy must be \"sequential\", \"row_interleaved\" or \"overlap\", got \"" +
                              s + "\"");
}

// Returns true for "tile" granularity, false for "row".
inline bool parse_granularity(const std::string& s) {
  if (s == "tile") return true;
  if (s == "row") return false;
  throw std::invalid_argument("gemm_pair: granularity must be \"row\" or \"tile\", got \"" + s + "\"");
}

inline Arch parse_arch(const std::string& s) { return parse_kernel_arch(s, "gemm_pair"); }

inline Activation parse_activation(const std::string& s) {
  if (s == "swiglu") return Activation::kSwiGLU;
  if (s == "gelu") return Activation::kGeLU;
  if (s == "none") return Activation::kNone;
  throw std::invalid_argument("gemm_pair: activation must be \"swiglu\", \"gelu\" or \"none\", got \"" + s + "\"");
}

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Tile counts of one launch (the Python model's Schedule properties).
struct Geometry {
  int64_t m = 0, k = 0, n0 = 0, n1 = 0;
  bool gated = true;
  int block_m = 64, block_n0 = kGemmPairBlockN, block_n1 = kGemmPairBlockN;
  int64_t split_k0 = 0;  // K columns a GEMM0 split reads; 0: not split
  int64_t split_k1 = 0;  // h columns a GEMM1 split reads; 0: not split

  int64_t h_width() const { return gated ? n0 / 2 : n0; }
  int h_cols_per_tile0() const { return gated ? block_n0 / 2 : block_n0; }
  int64_t m_blocks() const { return ceil_div(m, block_m); }
  int64_t n0_tiles() const { return ceil_div(h_width(), h_cols_per_tile0()); }
  int64_t n1_tiles() const { return ceil_div(n1, block_n1); }
  int64_t k0_cols() const { return split_k0 > 0 ? split_k0 : k; }
  int64_t splits0() const { return ceil_div(k, k0_cols()); }
  int64_t k1_cols() const { return split_k1 > 0 ? split_k1 : h_width(); }
  int64_t splits() const { return ceil_div(h_width(), k1_cols()); }
  int64_t num_tiles() const { return m_blocks() * (n0_tiles() * splits0() + n1_tiles() * splits()); }
  // GEMM0 tiles [s * k1_cols() / h_cols_per_tile0(), last) produce the h columns split s reads.
  int64_t last_producer(int64_t s) const {
    return ceil_div(std::min((s + 1) * k1_cols(), h_width()), h_cols_per_tile0());
  }

  void validate() const {
    if (m < 1 || k < 1 || n0 < 1 || n1 < 1 || (gated && n0 % 2)) throw std::invalid_argument("gemm_pair: bad shape");
    if (split_k0 < 0 || split_k0 % 8) {
      throw std::invalid_argument("gemm_pair: split_k0 must be 0 (no split) or a positive multiple of 8, got " +
                                  std::to_string(split_k0));
    }
    if (split_k1 < 0 || split_k1 % h_cols_per_tile0()) {
      throw std::invalid_argument("gemm_pair: split_k1 must be 0 (no split) or a positive multiple of the " +
                                  std::to_string(h_cols_per_tile0()) + " h columns a GEMM0 tile makes, got " +
                                  std::to_string(split_k1));
    }
  }
};

// The op's automatic K-splits (-1 for split_k0 / split_k1), given the launch's CTA slots (SMs x
// CTAs an SM of the tile config). Here so that profiling tools pick the same splits.
// GEMM0 has n0 / 128 tiles a row block (224 for LLaMA-3-8B), fewer than a GPU's CTA slots at
// decode sizes when several CTAs fit on an SM (396 slots at block_m 16). The first wave is then
// GEMM0 and waiting GEMM1 CTAs, and consecutive tickets tend to go to CTAs of one SM: GEMM0 piles
// up three to an SM on some SMs and leaves others none (measured: GEMM0 streams at 3.3 instead of
// 4.0 TB/s on an H200). When GEMM0's tiles fill at most two thirds of the slots, split it along K
// into about two waves of slots, so that every SM streams GEMM0 and a freed slot takes the next
// split; no split shorter than 512 columns. (With one CTA an SM, or GEMM0 filling most slots,
// splitting measured slower: docs/perf-notes.md.)
inline int64_t auto_split_k0(const Geometry& g, int64_t slots, int ctas_per_sm) {
  const int64_t tiles = g.m_blocks() * g.n0_tiles();
  if (ctas_per_sm < 2 || 3 * tiles > 2 * slots) return 0;
  const int64_t splits = std::min(ceil_div(2 * slots, tiles), std::max<int64_t>(1, g.k / 512));
  if (splits <= 1) return 0;
  return ceil_div(ceil_div(g.k, splits), 256) * 256;
}

// GEMM1 has n1 / 128 output tiles a row block (32 for LLaMA-3-8B): at decode sizes too few to
// fill the GPU, so it is split along K until its tiles alone fill about one wave of CTA slots,
// but no split narrower than 256 h columns.
inline int64_t auto_split_k1(const Geometry& g, int64_t slots) {
  const int64_t tiles = g.m_blocks() * g.n1_tiles();
  if (tiles >= slots) return 0;
  const int64_t per_tile = g.h_cols_per_tile0();
  const int64_t splits = std::min(ceil_div(slots, tiles), std::max<int64_t>(1, g.h_width() / 256));
  if (splits <= 1) return 0;
  return ceil_div(ceil_div(g.h_width(), splits), per_tile) * per_tile;
}

constexpr int64_t kGroupN = 8;  // the "sequential" order's column group (GROUP_N in the model)

using Entry = std::array<int32_t, 4>;  // (gemm, m block, n tile, K-split)

// Every policy places a GEMM0 tile's K-splits at consecutive tickets: they run side by side, and
// the last to finish reduces them and publishes the tile (nothing waits on a single split).

// The order of `policy` (see make_schedule in gemm_pair_schedule.py). Overlap needs tile
// granularity: at row granularity a split would wait for GEMM0 tiles ordered after it.
inline std::vector<Entry> build_order(const Geometry& g, Policy policy, bool tile_sync, int64_t lag) {
  g.validate();
  if (policy == Policy::kOverlap && !tile_sync) {
    throw std::invalid_argument("gemm_pair: the \"overlap\" policy needs granularity \"tile\"");
  }
  if (lag < 0) throw std::invalid_argument("gemm_pair: lag must be >= 0");
  std::vector<Entry> order;
  order.reserve(static_cast<size_t>(g.num_tiles()));
  const int64_t n0t = g.n0_tiles(), n1t = g.n1_tiles(), splits = g.splits();
  const int64_t splits0 = g.splits0();
  auto g0_tile = [&](int64_t m, int64_t j) {
    for (int64_t s = 0; s < splits0; ++s) order.push_back({0, int32_t(m), int32_t(j), int32_t(s)});
  };
  auto g0 = [&](int64_t m) {
    for (int64_t j = 0; j < n0t; ++j) g0_tile(m, j);
  };
  auto g1 = [&](int64_t m, int64_t s) {
    for (int64_t n = 0; n < n1t; ++n) order.push_back({1, int32_t(m), int32_t(n), int32_t(s)});
  };
  if (policy == Policy::kSequential) {
    // Column groups swept over every row block: a group's weight tiles stay in L2 while all row
    // blocks pass. GEMM1 goes split by split, so the earliest-ready splits come first.
    for (int64_t j0 = 0; j0 < n0t; j0 += kGroupN)
      for (int64_t m = 0; m < g.m_blocks(); ++m)
        for (int64_t j = j0; j < std::min(j0 + kGroupN, n0t); ++j) g0_tile(m, j);
    for (int64_t s = 0; s < splits; ++s)
      for (int64_t n0 = 0; n0 < n1t; n0 += kGroupN)
        for (int64_t m = 0; m < g.m_blocks(); ++m)
          for (int64_t n = n0; n < std::min(n0 + kGroupN, n1t); ++n)
            order.push_back({1, int32_t(m), int32_t(n), int32_t(s)});
  } else if (policy == Policy::kRowInterleaved) {
    for (int64_t m = 0; m < g.m_blocks(); ++m) {
      g0(m);
      for (int64_t s = 0; s < splits; ++s) g1(m, s);
    }
  } else {
    for (int64_t m = 0; m < g.m_blocks(); ++m) {
      int64_t next_split = 0;
      for (int64_t j = 0; j < n0t; ++j) {
        g0_tile(m, j);
        const int64_t emitted = j + 1;
        while (next_split < splits && emitted >= std::min(n0t, g.last_producer(next_split) + lag)) {
          g1(m, next_split++);
        }
      }
      while (next_split < splits) g1(m, next_split++);
    }
  }
  return order;
}

}  // namespace cute_ops::gemm_pair
