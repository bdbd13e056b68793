#pragma once
// What launch heuristics need to know about a device (SM count, compute capability major), read
// once per device and cached: every launch asks, and the attribute queries are not free.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "common/cuda_check.h"

namespace cute_ops {

struct DeviceInfo {
  int sms = 0, major = 0;
};

inline DeviceInfo device_info(int device) {
  static std::array<std::atomic<int>, 64> sms{}, major{};
  const bool cached = device >= 0 && device < static_cast<int>(sms.size());
  if (cached && sms[device].load(std::memory_order_acquire) != 0) {  // published last, below
    return {sms[device].load(std::memory_order_relaxed), major[device].load(std::memory_order_relaxed)};
  }
  DeviceInfo info;
  check_cuda(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check_cuda(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  if (cached) {
    major[device].store(info.major, std::memory_order_relaxed);
    sms[device].store(info.sms, std::memory_order_release);
  }
  return info;
}

}  // namespace cute_ops
