#pragma once
// A value per device, computed on first use and kept for the process. Launch heuristics and
// kernel attributes are properties of one device, and a process may drive different GPUs (an H100
// and an A100), so nothing of the kind may be cached per process alone.
#include <array>
#include <atomic>

namespace cute_ops {

constexpr int kMaxCachedDevices = 64;  // devices beyond this are not cached: computed every time

// A nonzero int per device. Threads that race on a device's first use each compute it and store
// the same value, so no lock is needed; 0 marks "not computed yet", hence the nonzero.
class PerDeviceInt {
 public:
  template <typename Compute>
  int get(int device, Compute&& compute) {
    const bool cached = device >= 0 && device < kMaxCachedDevices;
    if (cached) {
      if (const int v = values_[device].load(std::memory_order_acquire)) return v;
    }
    const int v = compute();
    if (cached) values_[device].store(v, std::memory_order_release);
    return v;
  }

 private:
  std::array<std::atomic<int>, kMaxCachedDevices> values_{};
};

}  // namespace cute_ops
