// The sets of common/arrival_counters.h: a map from (device, stream, capture) to device memory.
#include "common/arrival_counters.h"

#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "common/cuda_check.h"

namespace cute_ops {

namespace {

constexpr size_t kMinCounters = 4096;  // 16 KB: flash_decode's b x kv heads x row blocks for b <= 512 at 8 heads

struct CounterSet {
  int* counters = nullptr;
  size_t count = 0;
};

// (device, stream, capture id; 0 outside a capture)
using Key = std::tuple<int, cudaStream_t, unsigned long long>;

std::mutex sets_mutex;
std::map<Key, CounterSet>& sets() {
  static auto* m = new std::map<Key, CounterSet>;  // never destroyed: kernels may run at exit
  return *m;
}

// count zeroed counters, ready before any later work on any stream.
int* allocate_zeroed(int device, size_t count) {
  // This may run while this thread or another captures a CUDA graph: relaxed mode lets the
  // allocation through without invalidating that capture, and the zeroing runs on a private
  // stream, so it is not recorded into the graph and waits for none of the user's work.
  const c10::cuda::CUDAStreamCaptureModeGuard relaxed(cudaStreamCaptureModeRelaxed);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  void* block = nullptr;
  cudaStream_t zeroing = nullptr;
  check_cuda(cudaMalloc(&block, count * sizeof(int)), "arrival counters allocation");
  check_cuda(cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking), "arrival counters stream");
  check_cuda(cudaMemsetAsync(block, 0, count * sizeof(int), zeroing), "arrival counters zeroing");
  check_cuda(cudaStreamSynchronize(zeroing), "arrival counters zeroing");
  check_cuda(cudaStreamDestroy(zeroing), "arrival counters stream");
  return static_cast<int*>(block);
}

}  // namespace

int* arrival_counters(int device, cudaStream_t stream, size_t count) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  check_cuda(cudaStreamGetCaptureInfo(stream, &status, &capture), "arrival counters: capture status");
  TORCH_CHECK(status != cudaStreamCaptureStatusInvalidated, "cute_ops: the stream's CUDA graph capture was invalidated");
  const Key key{device, stream, status == cudaStreamCaptureStatusActive ? capture : 0ULL};
  std::lock_guard<std::mutex> lock(sets_mutex);
  CounterSet& set = sets()[key];
  if (set.count < count) {
    // The old set is left allocated: work already queued (or a captured graph) may still use it.
    // The set changes only once the new memory exists, so a failed allocation leaves it as it was.
    const size_t grown = std::max(kMinCounters, 2 * count);
    int* counters = allocate_zeroed(device, grown);
    set.counters = counters, set.count = grown;
  }
  return set.counters;
}

}  // namespace cute_ops
