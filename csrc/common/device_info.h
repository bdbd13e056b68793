#pragma once
// What launch heuristics need to know about a device (SM count, compute capability major, peak
// DRAM bandwidth), read once per device and cached: every launch asks, and the attribute queries
// are not free.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "common/cuda_check.h"

namespace cute_ops {

struct DeviceInfo {
  int sms = 0, major = 0;
  int dram_gbps = 0;  // peak DRAM bandwidth in GB/s, from the memory clock and bus width (0: unknown)
};

inline DeviceInfo device_info(int device) {
  static std::array<std::atomic<int>, 64> sms{}, major{}, dram_gbps{};
  const bool cached = device >= 0 && device < static_cast<int>(sms.size());
  if (cached && sms[device].load(std::memory_order_acquire) != 0) {  // published last, below
    return {sms[device].load(std::memory_order_relaxed), major[device].load(std::memory_order_relaxed),
            dram_gbps[device].load(std::memory_order_relaxed)};
  }
  DeviceInfo info;
  check_cuda(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check_cuda(cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device), "compute capability");
  int clock_khz = 0, bus_bits = 0;  // a device that does not say leaves them 0
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    clock_khz = bus_bits = 0;
  }
  info.dram_gbps = static_cast<int>(2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9);  // double data rate
  if (cached) {
    major[device].store(info.major, std::memory_order_relaxed);
    dram_gbps[device].store(info.dram_gbps, std::memory_order_relaxed);
    sms[device].store(info.sms, std::memory_order_release);
  }
  return info;
}

}  // namespace cute_ops
