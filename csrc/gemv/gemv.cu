// Launch configuration for gemv: as many CTAs as fit on the GPU at once (at most one per unit of
// 16 weight rows), each looping over its units, launched as a programmatic dependent of the
// previous kernel on sm_90 so that its first weight loads overlap that kernel's tail.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/dispatch.cuh"
#include "common/kernel_attributes.h"
#include "common/per_device.h"
#include "gemv/gemv_kernel.cuh"

namespace cute_ops {

namespace {

// CTAs of gemv's kernels that fit on the current device at once: any instantiation's (they share
// the launch bounds and the shared memory), for gemv_split_plan.
int64_t gemv_slots(int device) {
  static DynamicSmemOptIn smem_opt_in;
  static PerDeviceInt slots;
  auto* kernel = &gemv::gemv_kernel<__nv_bfloat16, false, false, false>;
  smem_opt_in.apply(kernel, gemv::kSmemBytes, "gemv shared memory");
  return slots.get(device, [&] {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, gemv::kThreads, gemv::kSmemBytes),
               "gemv occupancy");
    return std::max(n, 1) * device_info(device).sms;
  });
}

// CTAs for `work` pieces of work on `slots`: every CTA the same number of pieces. With 384 units
// on 264 slots, 192 CTAs of 2 units finish together where 264 CTAs of 1 or 2 would leave 120
// streaming alone at the end.
int64_t balanced_ctas(int64_t work, int64_t slots) {
  const int64_t per_cta = (work + slots - 1) / slots;
  return (work + per_cta - 1) / per_cta;
}

// kSplit: gemv_split_kernel, sp.k_splits slices a unit (plain calls of a k-splits build only).
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU,
          GemvExchangeMode kExchange = GemvExchangeMode::kNone, bool kSplit = false>
void launch(const GemvParams& p, const GemvExchangeParams& e, const GemvSplitParams& sp, cudaStream_t stream) {
  auto* kernel = [] {
#if CUTE_OPS_GEMV_K_SPLITS
    if constexpr (kSplit) return &gemv::gemv_split_kernel<T, kNorm, kResidual, kSwiGLU>;
    else
#endif
    if constexpr (kExchange == GemvExchangeMode::kNone) return &gemv::gemv_kernel<T, kNorm, kResidual, kSwiGLU>;
    else return &gemv::gemv_exchange_kernel<T, kNorm, kResidual, kSwiGLU, kExchange>;
  }();
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo info = device_info(device);
  static DynamicSmemOptIn smem_opt_in;
  smem_opt_in.apply(kernel, gemv::kSmemBytes, "gemv shared memory");
  static PerDeviceInt ctas_per_sm;
  const int per_sm = ctas_per_sm.get(device, [&] {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, gemv::kThreads, gemv::kSmemBytes), "gemv occupancy");
    return std::max(n, 1);
  });
  // Every CTA the same number of units (balanced_ctas), or of slices of units with k-splits.
  const int64_t units = gemv::num_units(p);
  const int64_t slots = static_cast<int64_t>(info.sms) * per_sm;
  const int64_t ctas = balanced_ctas(kSplit ? units * sp.k_splits : units, slots);
  if (kExchange == GemvExchangeMode::kPush && ctas > kGemvMaxPushCtas) {
    throw std::runtime_error("cute_ops gemv: a push would run " + std::to_string(ctas) + " CTAs, more than the " +
                             std::to_string(kGemvMaxPushCtas) + " flags a slot has (gemv_exchange.h)");
  }
  if constexpr (kSplit) {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads), gemv::kSmemBytes, stream, p, sp);
  } else if constexpr (kExchange == GemvExchangeMode::kNone) {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads), gemv::kSmemBytes, stream, p);
  } else {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads), gemv::kSmemBytes, stream, p, e);
  }
}

}  // namespace

// k-splits: the fewest slices a unit (a power of two dividing k's steps, each slice at least a step
// for every warp) that let every CTA slot stream (balanced_ctas fills 95% of the slots), or the
// fullest there is. Depends on n, k and the device only, never on m: rows stay independent.
GemvSplitPlan gemv_split_plan(const GemvParams& p, int device) {
  GemvSplitPlan plan;
  plan.units = gemv::num_units(p);
  if (!gemv::kKSplits || p.m == 0 || p.out_cols == 0) return plan;
  const int64_t slots = gemv_slots(device);
  const int n_steps = (p.k + gemv::kStepK - 1) / gemv::kStepK;
  double best_fill = 0.0;
  for (int s = 1; s <= 16 && n_steps % s == 0 && n_steps / s >= gemv::kWarps; s *= 2) {
    const double fill = static_cast<double>(balanced_ctas(plan.units * s, slots)) / static_cast<double>(slots);
    if (fill > best_fill + 1e-9) plan.k_splits = s, best_fill = fill;
    if (fill >= 0.95) break;
  }
  if (plan.k_splits > 1) {
    plan.sum_floats = plan.units * plan.k_splits * 32 * 4;
    plan.sum_sq_floats = plan.units * plan.k_splits * kGemvMaxRows;
  }
  return plan;
}

void run_gemv(const GemvParams& p, cudaStream_t stream, const GemvExchangeParams& e, const GemvSplitParams& split) {
  if (p.m == 0 || p.out_cols == 0) return;
  const bool norm = p.norm_weight != nullptr, residual = p.residual != nullptr;
  const bool swiglu = p.activation == GemvActivation::kSwiGLU;
  auto by_flags = [&](auto tag) {
    using T = decltype(tag);
    // The exchange's two sides exist in the forms a tensor-parallel layer uses: a push with or
    // without the residual (o and down), a pull with the norm (qkv and the output projection;
    // gate/up with SwiGLU). run_gemv's callers (gemv_op.cpp) check for these.
    if (e.mode == GemvExchangeMode::kPush) {
      if (norm || swiglu) throw std::invalid_argument("gemv: a push takes no norm and no activation");
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        launch<T, false, kResidual, false, GemvExchangeMode::kPush>(p, e, split, stream);
      });
      return;
    }
    if (e.mode == GemvExchangeMode::kPull) {
      if (!norm || residual) throw std::invalid_argument("gemv: a pull takes a norm and no residual");
      CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] { launch<T, true, false, kSwiGLU, GemvExchangeMode::kPull>(p, e, split, stream); });
      return;
    }
    CUTE_OPS_BOOL_SWITCH(norm, kNorm, [&] {
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] {
          if constexpr (gemv::kKSplits) {
            if (split.k_splits > 1) {
              launch<T, kNorm, kResidual, kSwiGLU, GemvExchangeMode::kNone, true>(p, e, split, stream);
              return;
            }
          }
          launch<T, kNorm, kResidual, kSwiGLU>(p, e, split, stream);
        });
      });
    });
  };
  if (p.dtype == DType::kBFloat16) by_flags(__nv_bfloat16{});
  else if (p.dtype == DType::kFloat16) by_flags(__half{});
  else throw std::invalid_argument("gemv: float16 or bfloat16 only");
}

}  // namespace cute_ops
