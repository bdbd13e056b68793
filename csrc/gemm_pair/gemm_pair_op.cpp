// Torch glue for gemm_pair: the tile config choice, the order table (order_upload.h),
// per-call workspace (sized by make_params, params.h), launch, registration. The input rules are
// in gemm_pair_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "common/arrival_counters.h"
#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/per_device.h"
#include "common/torch_utils.h"
#include "gemm_pair/gemm_pair_checks.h"
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/order_upload.h"
#include "gemm_pair/params.h"
#include "gemm_pair/tile_order.h"

namespace cute_ops {

namespace {

using gemm_pair::Activation;
using gemm_pair::Arch;
using gemm_pair::Geometry;
using gemm_pair::order_table;
using gemm_pair::Policy;

// 256-row tiles (sm90 only) from this many rows: they read a third fewer L2 bytes a flop than
// 128-row ones, which are L2-bound at large M (H100, M = 512: 340 against 374 us; M = 8192: 4519
// against 5754; docs/perf-notes.md).
constexpr int64_t kWideTileMinRows = 512;

// Whether this build and `device` have the sm90 kernels of a tile height, 64 or 256 rows (asked
// once per device, height and dtype: cached as 2 for yes and 1 for no, since the cache takes 0 for
// "not asked yet").
bool has_sm90_tiles(int device, int block_m, bool is_bf16) {
  static std::array<PerDeviceInt, 4> cache;
  return cache[(block_m == 256) * 2 + is_bf16].get(device, [&] {
    try {
      return gemm_pair_resolve_arch(block_m, is_bf16, Arch::kSm90) == Arch::kSm90 ? 2 : 1;
    } catch (const std::invalid_argument&) {  // not a 9.x device, or a build without them
      return 1;
    }
  }) == 2;
}

// Whether a GEMM0 split (0 or less: none) is made of whole sm90 K tiles. The sm90 kernels load
// only whole 64-column K tiles; other splits run the sm80 kernels when the kind is left to the op
// (forced, the checks refuse them), so they get no 256-row tiles either.
bool fits_sm90_split(int64_t split_k0) { return split_k0 <= 0 || split_k0 % gemm_pair::kSm90SplitStep == 0; }

// Decode sizes, where the weights' stream sets the time: up to kSm80SmallRows rows the sm80 16-row
// tiles are the fastest on both Hopper GPUs (H200, M = 8: 100 against 104 us for sm90's 64-row
// tiles); above, up to 64 rows, sm90's 64-row tiles, whose TMA ring keeps more bytes in flight an
// SM (H200 since session 36; H100 since session 38's tail and L2 changes: M = 48 133 against 142
// us for sm80's 64-row tiles, M = 64 135 against 143; docs/perf-notes.md).
constexpr int64_t kSm80SmallRows = 8;
constexpr int64_t kSm90SmallRowsMax = 64;

// Whether a call whose kind is left to the op (and tile height left to it, or 64) runs the sm90
// 64-row tiles at its M, where this build and the device have them and the GEMM0 split fits them.
bool small_on_sm90(int64_t m, Arch arch, int64_t block_m, bool is_bf16, int64_t split_k0, int device) {
  return arch == Arch::kAuto && (block_m == 0 || block_m == 64) && m > kSm80SmallRows &&
         m <= kSm90SmallRowsMax && fits_sm90_split(split_k0) && has_sm90_tiles(device, 64, is_bf16);
}

// The tile config for M rows: 256 rows from kWideTileMinRows where the sm90 kernels may run and
// have them; 64 rows where small_on_sm90 says; else the smallest of 16, 64 and 128 rows that holds
// M (sm90 forced: no 16-row config).
int auto_block_m(int64_t m, Arch arch, bool wide, bool small_sm90) {
  if (arch != Arch::kSm80 && wide && m >= kWideTileMinRows) return 256;
  if (small_sm90) return 64;
  if (arch == Arch::kSm90) return m <= 64 ? 64 : 128;
  return m <= 16 ? 16 : m <= 64 ? 64 : 128;
}

// CTAs of a config that fit on an SM of `device` (the current device), for the K-splits and the
// overlap policy's lag: an occupancy query, made once per (device, kernel kind, config, dtype).
int ctas_per_sm(int device, int block_m, bool is_bf16, Arch arch) {
  static std::array<PerDeviceInt, 16> cache;
  const int tile = block_m == 16 ? 0 : block_m == 64 ? 1 : block_m == 128 ? 2 : 3;
  const int config = ((arch == Arch::kSm90) * 4 + tile) * 2 + is_bf16;
  return cache[config].get(device, [&] { return std::max(1, gemm_pair_ctas_per_sm(block_m, is_bf16, arch)); });
}

// The kernel kind a call runs: `arch` resolved for its tile config on the current device. Left to
// the op, the sm90 kernels run the 128- and 256-row tiles and the small-M calls small_on_sm90
// names; other 64-row calls run the sm80 kernels (H100, M = 64: 145 against 150 us), and only
// GEMM0 splits that fits_sm90_split accepts run sm90.
Arch kernel_kind(int block_m, bool is_bf16, Arch arch, int64_t split_k0, bool small_sm90) {
  const Arch kind = gemm_pair_resolve_arch(block_m, is_bf16, arch);
  if (kind == Arch::kSm90 && arch == Arch::kAuto && ((block_m < 128 && !small_sm90) || !fits_sm90_split(split_k0))) {
    return gemm_pair_resolve_arch(block_m, is_bf16, Arch::kSm80);
  }
  return kind;
}

at::Tensor gemm_pair_cuda(const at::Tensor& a, const at::Tensor& b0, const at::Tensor& b1,
                          const std::string& activation, const std::string& policy, const std::string& granularity,
                          int64_t split_k0, int64_t split_k1, int64_t block_m, int64_t lag, bool separate_launches,
                          const std::string& arch) {
  check_gemm_pair(a, b0, b1, activation, policy, granularity, split_k0, split_k1, block_m, lag, arch);  // gemm_pair_checks.cpp
  const Activation act = gemm_pair::parse_activation(activation);
  const Policy pol = gemm_pair::parse_policy(policy);
  const bool tile_sync = gemm_pair::parse_granularity(granularity);
  const int64_t m = a.size(0), k = a.size(1), n0 = b0.size(0), n1 = b1.size(0);
  at::Tensor out = at::empty({m, n1}, a.options());
  if (m == 0) return out;
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = current_stream(a);

  gemm_pair::Problem problem;
  problem.m = m, problem.k = k, problem.n0 = n0, problem.n1 = n1, problem.lda = a.stride(0);
  problem.activation = act, problem.tile_sync = tile_sync, problem.is_bf16 = a.scalar_type() == at::kBFloat16;
  const Arch asked = gemm_pair::parse_arch(arch);
  const int device = a.device().index();
  const bool wide = has_sm90_tiles(device, 256, problem.is_bf16) && fits_sm90_split(split_k0);
  const bool small_sm90 = small_on_sm90(m, asked, block_m, problem.is_bf16, split_k0, device);
  problem.block_m = block_m ? static_cast<int>(block_m) : auto_block_m(m, asked, wide, small_sm90);
  problem.split_k0 = split_k0, problem.split_k1 = split_k1;
  const Arch kind = kernel_kind(problem.block_m, problem.is_bf16, asked, split_k0, small_sm90);
  problem.ctas_per_sm = ctas_per_sm(device, problem.block_m, problem.is_bf16, kind);
  problem.slots = int64_t{device_info(device).sms} * problem.ctas_per_sm;
  gemm_pair::Plan plan = gemm_pair::make_params(problem);
  const Geometry& g = plan.geometry;
  // The overlap policy's lag counts GEMM0 tiles: by default the tiles whose splits fill the slots.
  const int64_t lag_used = lag < 0 ? std::max<int64_t>(1, problem.slots / g.splits0()) : lag;
  // The two-launch control runs the sequential order's GEMM0 part, then its GEMM1 part.
  plan.params.order =
      order_table(g, separate_launches ? Policy::kSequential : pol, tile_sync, lag_used, device, stream);

  // Workspace from the plan's sizes. The counters are this stream's (or this capture's) zeroed
  // set, which every launch leaves zero: no memset before a launch or a replay.
  int* counters = arrival_counters(device, stream, static_cast<size_t>(plan.counters.size));
  at::Tensor h = at::empty({plan.h_elems}, a.options());
  at::Tensor partials[2];
  float* partial_ptrs[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    if (plan.partials[i] == 0) continue;
    partials[i] = at::empty({plan.partials[i]}, a.options().dtype(at::kFloat));
    partial_ptrs[i] = partials[i].data_ptr<float>();
  }
  gemm_pair::bind_workspace(plan, counters, partial_ptrs);
  GemmPairParams& p = plan.params;
  p.a = a.data_ptr(), p.b0 = b0.data_ptr(), p.b1 = b1.data_ptr(), p.h = h.data_ptr(), p.out = out.data_ptr();
  if (!separate_launches) {
    run_gemm_pair(p, g.block_m, kind, stream);
    return out;
  }
  // The same tiles as two launches ordered by the stream: what the fused launch is measured against.
  for (const GemmPairParams& launch : gemm_pair::two_launch_params(plan)) run_gemm_pair(launch, g.block_m, kind, stream);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("gemm_pair", &gemm_pair_cuda); }

}  // namespace cute_ops
