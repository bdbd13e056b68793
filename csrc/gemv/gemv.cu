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
#if CUTE_OPS_GEMV_STREAM_K
#include "gemv/gemv_stream_k.cuh"
#endif
#if CUTE_OPS_GEMV_TILES
#include "gemv/gemv_tiles.cuh"
#endif

namespace cute_ops {

namespace {

// CTAs of `kernel` that fit on `device` at once (cached in `cache`, one per kernel).
template <typename Kernel>
int64_t ctas_that_fit(Kernel* kernel, int device, PerDeviceInt& cache) {
  return cache.get(device, [&] {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, gemv::kThreads, gemv::kSmemBytes),
               "gemv occupancy");
    return std::max(n, 1) * device_info(device).sms;
  });
}

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU,
          GemvExchangeMode kExchange = GemvExchangeMode::kNone>
void launch(const GemvParams& p, const GemvExchangeParams& e, cudaStream_t stream) {
  auto* kernel = [] {
    if constexpr (kExchange == GemvExchangeMode::kNone) return &gemv::gemv_kernel<T, kNorm, kResidual, kSwiGLU>;
    else return &gemv::gemv_exchange_kernel<T, kNorm, kResidual, kSwiGLU, kExchange>;
  }();
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo info = device_info(device);
  static DynamicSmemOptIn smem_opt_in;
  smem_opt_in.apply(kernel, gemv::kSmemBytes, "gemv shared memory");
  static PerDeviceInt resident;
  // Every CTA the same number of units: with 384 units on 264 slots, 192 CTAs of 2 units finish
  // together where 264 CTAs of 1 or 2 would leave 120 streaming alone at the end.
  const int64_t units = gemv::num_units(p);
  const int64_t slots = ctas_that_fit(kernel, device, resident);
  const int64_t units_per_cta = (units + slots - 1) / slots;
  const int64_t ctas = (units + units_per_cta - 1) / units_per_cta;
  if (kExchange == GemvExchangeMode::kPush && ctas > kGemvMaxPushCtas) {
    throw std::runtime_error("cute_ops gemv: a push would run " + std::to_string(ctas) + " CTAs, more than the " +
                             std::to_string(kGemvMaxPushCtas) + " flags a slot has (gemv_exchange.h)");
  }
  if constexpr (kExchange == GemvExchangeMode::kNone) {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads), gemv::kSmemBytes, stream, p);
  } else {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads), gemv::kSmemBytes, stream, p, e);
  }
}

// CTAs of gemv's kernels that fit on the current device at once (they share the launch bounds
// and the shared memory), for gemv_stream_k_ctas.
int64_t gemv_slots(int device) {
  static DynamicSmemOptIn smem_opt_in;
  static PerDeviceInt slots;
  auto* kernel = &gemv::gemv_kernel<__nv_bfloat16, false, false, false>;
  smem_opt_in.apply(kernel, gemv::kSmemBytes, "gemv shared memory");
  return ctas_that_fit(kernel, device, slots);
}

#if CUTE_OPS_GEMV_STREAM_K
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
void launch_stream_k(const GemvParams& p, const GemvStreamKParams& sk, cudaStream_t stream) {
  auto* kernel = &gemv::gemv_stream_k_kernel<T, kNorm, kResidual, kSwiGLU>;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  static DynamicSmemOptIn smem_opt_in;
  smem_opt_in.apply(kernel, gemv::kSmemBytes, "gemv shared memory");
  // No more CTAs than fit at once (the plan counted the plain kernel's slots; this one's registers
  // differ): fewer CTAs only make the shares longer (ctas is read in the kernel as gridDim.x).
  static PerDeviceInt resident;
  const int64_t ctas = std::min(sk.ctas, ctas_that_fit(kernel, device, resident));
  launch_dependent(device_info(device).major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(gemv::kThreads),
                   gemv::kSmemBytes, stream, p, sk);
}
#endif

#if CUTE_OPS_GEMV_TILES
template <typename T, bool kNorm, bool kResidual, bool kSwiGLU>
void launch_tiles(const GemvParams& p, const GemvTileParams& t, cudaStream_t stream) {
  auto* kernel = &gemv::gemv_tiles_kernel<T, kNorm, kResidual, kSwiGLU>;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const int64_t ctas = gemv::num_units(p) * t.n_kt;
  launch_dependent(device_info(device).major >= 9, kernel, dim3(static_cast<unsigned>(ctas)),
                   dim3(gemv::kTileThreads), 0, stream, p, t);
}
#endif

}  // namespace

int64_t gemv_tiles_n_kt(const GemvParams& p, int device) {
#if CUTE_OPS_GEMV_TILES
  if (p.m == 0 || p.out_cols == 0) return 0;
  if (CUTE_OPS_GEMV_TILES == 2 && gemv::num_units(p) <= gemv_slots(device)) return 0;
  return (p.k + gemv::kTileK - 1) / gemv::kTileK;
#else
  (void)p, (void)device;
  return 0;
#endif
}

int64_t gemv_tiles_units(const GemvParams& p) { return gemv::num_units(p); }

// Stream-K where the plain kernel needs more than one wave of CTAs and its busiest CTA streams at
// least one step a warp more than an equal share would (a unit's steps go to a CTA's warps in
// turn): 8B's qkv (384 units of 32 steps on 264 slots: 2 units against 1.45), TP=2's gate/up (896:
// 4 against 3.4), 70B TP=2's qkv (320 of 64 steps: 2 against 1.2), the lm_heads. Not in one wave
// (8B TP=2's qkv, 192 units): there stream-K measured 407 -> 421 us a step (session 45), its
// pieces' stores and sums costing more than the spread gains. Each CTA's share is at least a step
// a warp. From n, k and the device only, never m: rows stay independent.
int64_t gemv_stream_k_ctas(const GemvParams& p, int device) {
  if (!gemv::kStreamK || p.m == 0 || p.out_cols == 0) return 0;
  const int64_t slots = gemv_slots(device), units = gemv::num_units(p);
  if (units <= slots) return 0;
  const int64_t n_steps = (p.k + gemv::kStepK - 1) / gemv::kStepK, total = units * n_steps;
  const int64_t ctas = std::min(slots, total / gemv::kWarps);
  if (ctas < 2) return 0;
  const int64_t plain_steps = (units + slots - 1) / slots * n_steps, share_steps = (total + ctas - 1) / ctas;
  return plain_steps - share_steps >= gemv::kWarps ? ctas : 0;
}

void run_gemv(const GemvParams& p, cudaStream_t stream, const GemvExchangeParams& e, const GemvStreamKParams& sk,
              const GemvTileParams& tiles) {
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
        launch<T, false, kResidual, false, GemvExchangeMode::kPush>(p, e, stream);
      });
      return;
    }
    if (e.mode == GemvExchangeMode::kPushLines) {
      if (norm || swiglu) throw std::invalid_argument("gemv: a push of lines takes no norm and no activation");
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        launch<T, false, kResidual, false, GemvExchangeMode::kPushLines>(p, e, stream);
      });
      return;
    }
    if (e.mode == GemvExchangeMode::kPull) {
      if (!norm || residual) throw std::invalid_argument("gemv: a pull takes a norm and no residual");
      CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] { launch<T, true, false, kSwiGLU, GemvExchangeMode::kPull>(p, e, stream); });
      return;
    }
    CUTE_OPS_BOOL_SWITCH(norm, kNorm, [&] {
      CUTE_OPS_BOOL_SWITCH(residual, kResidual, [&] {
        CUTE_OPS_BOOL_SWITCH(swiglu, kSwiGLU, [&] {
#if CUTE_OPS_GEMV_TILES
          if (tiles.n_kt > 0) {
            launch_tiles<T, kNorm, kResidual, kSwiGLU>(p, tiles, stream);
            return;
          }
#endif
#if CUTE_OPS_GEMV_STREAM_K
          if (sk.ctas > 0) {
            launch_stream_k<T, kNorm, kResidual, kSwiGLU>(p, sk, stream);
            return;
          }
#endif
          launch<T, kNorm, kResidual, kSwiGLU>(p, e, stream);
        });
      });
    });
  };
  if (p.dtype == DType::kBFloat16) by_flags(__nv_bfloat16{});
  else if (p.dtype == DType::kFloat16) by_flags(__half{});
  else throw std::invalid_argument("gemv: float16 or bfloat16 only");
}

}  // namespace cute_ops
