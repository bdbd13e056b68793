#pragma once
// How a gemv kernel is launched: as many CTAs as fit on the GPU at once (at most one per unit of
// 16 weight rows), each looping over its units, as a programmatic dependent of the previous
// kernel on sm_90 so that its first weight loads overlap that kernel's tail. Included by gemv.cu
// (the plain kernels) and gemv_exchange.cu (push and pull), which are separate translation units
// so that the plain kernels compile as they do without the exchange.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/device_info.h"
#include "common/kernel_attributes.h"
#include "common/per_device.h"
#include "gemv/gemv_kernel.cuh"

namespace cute_ops::gemv {

template <typename T, bool kNorm, bool kResidual, bool kSwiGLU,
          GemvExchangeMode kExchange = GemvExchangeMode::kNone>
inline void launch(const GemvParams& p, const GemvExchangeParams& e, cudaStream_t stream) {
  auto* kernel = [] {
    if constexpr (kExchange == GemvExchangeMode::kNone) return &gemv_kernel<T, kNorm, kResidual, kSwiGLU>;
    else return &gemv_exchange_kernel<T, kNorm, kResidual, kSwiGLU, kExchange>;
  }();
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo info = device_info(device);
  static DynamicSmemOptIn smem_opt_in;
  smem_opt_in.apply(kernel, kSmemBytes, "gemv shared memory");
  static PerDeviceInt ctas_per_sm;
  const int per_sm = ctas_per_sm.get(device, [&] {
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, kSmemBytes), "gemv occupancy");
    return std::max(n, 1);
  });
  // Every CTA the same number of units: with 384 units on 264 slots, 192 CTAs of 2 units finish
  // together where 264 CTAs of 1 or 2 would leave 120 streaming alone at the end.
  const int64_t units = num_units(p);
  const int64_t slots = static_cast<int64_t>(info.sms) * per_sm;
  const int64_t units_per_cta = (units + slots - 1) / slots;
  const int64_t ctas = (units + units_per_cta - 1) / units_per_cta;
  if (kExchange == GemvExchangeMode::kPush && ctas > kGemvMaxPushCtas) {
    throw std::runtime_error("cute_ops gemv: a push would run " + std::to_string(ctas) + " CTAs, more than the " +
                             std::to_string(kGemvMaxPushCtas) + " flags a slot has (gemv_exchange.h)");
  }
  if constexpr (kExchange == GemvExchangeMode::kNone) {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), kSmemBytes, stream, p);
  } else {
    launch_dependent(info.major >= 9, kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), kSmemBytes, stream, p, e);
  }
}


// run_gemv's push and pull (gemv_exchange.cu).
void run_gemv_exchange(const GemvParams& p, const GemvExchangeParams& e, cudaStream_t stream);

}  // namespace cute_ops::gemv
