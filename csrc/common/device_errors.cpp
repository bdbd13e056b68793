// The per-device status block of common/device_errors.h, the process-wide error mode, and the
// host-only ops that read and reset them (schemas in torch_bindings.cpp; Python side in
// cute_ops/errors.py). Built into every CUDA build, whatever families it has.
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/device_errors.h"

namespace cute_ops {

namespace {

constexpr int kMaxDevices = 64;

// The status block and a private stream of each device, created on first use and kept for the
// life of the process (a kernel in flight may still write the block at exit).
struct DeviceSlot {
  std::atomic<DeviceErrorStatus*> status{nullptr};
  cudaStream_t stream = nullptr;  // copies of the block; never the user's stream
};
std::array<DeviceSlot, kMaxDevices> slots;
std::mutex slots_mutex;

// 0: record, 1: trap. The environment variable sets the start value.
std::atomic<int> trap_mode{[] {
  const char* env = std::getenv("CUTE_OPS_DEVICE_ERRORS");
  return env != nullptr && std::string(env) == "trap" ? 1 : 0;
}()};

DeviceSlot& slot(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "cute_ops: device index ", device, " out of range");
  DeviceSlot& s = slots[device];
  if (s.status.load(std::memory_order_acquire) != nullptr) return s;
  std::lock_guard<std::mutex> lock(slots_mutex);
  if (s.status.load(std::memory_order_relaxed) != nullptr) return s;
  // The first op on a device may run while this thread or another captures a CUDA graph: relaxed
  // mode lets these one-time calls through without invalidating that capture. The zeroing runs
  // on a private stream, so it waits for none of the user's work.
  const c10::cuda::CUDAStreamCaptureModeGuard relaxed(cudaStreamCaptureModeRelaxed);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  void* block = nullptr;
  check_cuda(cudaMalloc(&block, sizeof(DeviceErrorStatus)), "device error status allocation");
  check_cuda(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "device error status stream");
  check_cuda(cudaMemsetAsync(block, 0, sizeof(DeviceErrorStatus), s.stream), "device error status reset");
  check_cuda(cudaStreamSynchronize(s.stream), "device error status reset");
  s.status.store(static_cast<DeviceErrorStatus*>(block), std::memory_order_release);
  return s;
}

// [reports, op, code, sequence, value, aux, aux2] of `device`'s block; all zero if no op has run
// there. wait: synchronise the device first, so that every kernel queued so far has reported;
// otherwise read what has landed (no wait for the user's work). reset: zero the block after reading.
std::vector<int64_t> device_errors(int64_t device, bool wait, bool reset) {
  DeviceSlot& s = slot(static_cast<int>(device));
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  if (wait) check_cuda(cudaDeviceSynchronize(), "cute_ops.check_errors: device synchronize");
  DeviceErrorStatus host{};
  DeviceErrorStatus* block = s.status.load(std::memory_order_acquire);
  check_cuda(cudaMemcpyAsync(&host, block, sizeof(host), cudaMemcpyDeviceToHost, s.stream),
             "cute_ops.check_errors: status read");
  if (reset && host.reports != 0) {
    check_cuda(cudaMemsetAsync(block, 0, sizeof(DeviceErrorStatus), s.stream), "cute_ops.check_errors: reset");
  }
  check_cuda(cudaStreamSynchronize(s.stream), "cute_ops.check_errors: status read");
  // A report still being written (peeking without wait) shows as reports > 0 with op 0.
  return {static_cast<int64_t>(host.reports), host.op, host.code, host.sequence, host.value, host.aux, host.aux2};
}

void set_device_error_mode(const std::string& mode) {
  TORCH_CHECK(mode == "record" || mode == "trap", "cute_ops.set_device_error_mode: mode must be 'record' or 'trap', "
              "got '", mode, "'");
  trap_mode.store(mode == "trap" ? 1 : 0, std::memory_order_relaxed);
}

std::string get_device_error_mode() { return trap_mode.load(std::memory_order_relaxed) ? "trap" : "record"; }

}  // namespace

DeviceErrorSink device_error_sink(int device) {
  return {slot(device).status.load(std::memory_order_acquire), trap_mode.load(std::memory_order_relaxed) != 0};
}

// No tensor arguments: CompositeImplicitAutograd is the key that such ops dispatch to.
TORCH_LIBRARY_IMPL(cute_ops, CompositeImplicitAutograd, m) {
  m.impl("device_errors", &device_errors);
  m.impl("set_device_error_mode", &set_device_error_mode);
  m.impl("get_device_error_mode", &get_device_error_mode);
}

}  // namespace cute_ops
