// The order tables of gemm_pair on the device: one per (device, geometry, policy), built on the
// host by the first call that needs it and kept on the device for the life of the process. That
// first call must not block its stream's work, nor break a CUDA graph being captured by it or by
// another thread (docs/gemm_pair.md, "The order upload"):
//   - the order goes through a pinned staging buffer and a private non-blocking stream, whose copy
//     records the table's `uploaded` event; the caller's stream waits for that event on the
//     device, never the host for the caller's stream;
//   - a stream that is being captured cannot depend on an event recorded outside its capture, so
//     a capturing caller waits for the event on the host instead: a small copy on an idle stream;
//   - device memory comes from cudaMalloc (a table outlives any graph's memory pool), and every
//     call that a global-mode capture counts as unsafe (cudaMalloc, cudaHostAlloc, event queries
//     and waits) runs with this thread in relaxed capture mode, so that it neither fails here nor
//     invalidates another thread's capture.
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/cuda_check.h"
#include "gemm_pair/order_upload.h"

namespace cute_ops::gemm_pair {

namespace {

constexpr size_t kStagingBytes = 256 << 10;  // larger tables go through it in several copies

// A device's upload path: the private stream and the staging buffer, one upload at a time.
struct Uploader {
  std::mutex mutex;
  cudaStream_t stream = nullptr;
  void* staging = nullptr;              // pinned, kStagingBytes
  cudaEvent_t staging_free = nullptr;   // recorded after each copy out of `staging`
};

struct OrderTable {
  std::mutex mutex;                      // held by the one thread that builds and uploads it
  std::atomic<bool> ready{false};        // data and uploaded are set (release / acquire)
  std::atomic<bool> upload_seen{false};  // uploaded was seen complete (after ready): no wait needed
  int4* data = nullptr;                  // device memory, never freed
  cudaEvent_t uploaded = nullptr;        // recorded once, after the table's last copy
};

using OrderKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool, int, int64_t, int64_t, int, bool, int64_t>;

// The maps, guarded by one mutex that is held only to find or add an entry. Entries are never
// removed, so the references handed out stay valid; never destroyed: they outlive the CUDA context.
struct OrderCache {
  std::mutex mutex;
  std::map<OrderKey, std::unique_ptr<OrderTable>> tables;
  std::map<int, std::unique_ptr<Uploader>> uploaders;
};

OrderCache& order_cache() {
  static auto* cache = new OrderCache();
  return *cache;
}

template <typename Map>
typename Map::mapped_type::element_type& find_or_add(Map& map, const typename Map::key_type& key) {
  std::lock_guard<std::mutex> lock(order_cache().mutex);
  auto& entry = map[key];
  if (!entry) entry = std::make_unique<typename Map::mapped_type::element_type>();
  return *entry;
}

// Copies `bytes` from the host to `dst` on the uploader's stream, through its staging buffer, and
// records `done` after the last copy. Waits on the host only for this stream's earlier copies out
// of the staging buffer. The current device is the uploader's.
void upload(Uploader& up, const void* src, size_t bytes, void* dst, cudaEvent_t done) {
  std::lock_guard<std::mutex> lock(up.mutex);
  if (!up.stream) check_cuda(cudaStreamCreateWithFlags(&up.stream, cudaStreamNonBlocking), "gemm_pair upload stream");
  if (!up.staging_free) {
    check_cuda(cudaEventCreateWithFlags(&up.staging_free, cudaEventDisableTiming), "gemm_pair upload event");
  }
  if (!up.staging) check_cuda(cudaHostAlloc(&up.staging, kStagingBytes, cudaHostAllocDefault), "gemm_pair staging");
  for (size_t offset = 0; offset < bytes; offset += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, bytes - offset);
    check_cuda(cudaEventSynchronize(up.staging_free), "gemm_pair staging reuse");
    std::memcpy(up.staging, static_cast<const char*>(src) + offset, n);
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + offset, up.staging, n, cudaMemcpyHostToDevice, up.stream),
               "gemm_pair order upload");
    check_cuda(cudaEventRecord(up.staging_free, up.stream), "gemm_pair order upload");
  }
  check_cuda(cudaEventRecord(done, up.stream), "gemm_pair order upload");
}

void build_and_upload(OrderTable& table, const Geometry& g, Policy policy, bool tile_sync, int64_t lag, int device) {
  const std::vector<Entry> order = build_order(g, policy, tile_sync, lag);
  const size_t bytes = order.size() * sizeof(Entry);
  // A retry after a failure keeps what the failed attempt allocated.
  if (!table.data) check_cuda(cudaMalloc(reinterpret_cast<void**>(&table.data), bytes), "gemm_pair order table");
  if (!table.uploaded) {
    check_cuda(cudaEventCreateWithFlags(&table.uploaded, cudaEventDisableTiming), "gemm_pair order event");
  }
  upload(find_or_add(order_cache().uploaders, device), order.data(), bytes, table.data, table.uploaded);
}

// Orders `stream` after the table's upload, until the upload has been seen complete once.
void wait_for_upload(OrderTable& table, cudaStream_t stream) {
  const cudaError_t state = cudaEventQuery(table.uploaded);
  if (state == cudaSuccess) {
    table.upload_seen.store(true, std::memory_order_release);
    return;
  }
  if (state != cudaErrorNotReady) check_cuda(state, "gemm_pair order upload");
  (void)cudaGetLastError();  // not ready is no error: keep it from failing the launch check
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture), "gemm_pair capture status");
  if (capture == cudaStreamCaptureStatusNone) {
    check_cuda(cudaStreamWaitEvent(stream, table.uploaded, 0), "gemm_pair order wait");
  } else {
    check_cuda(cudaEventSynchronize(table.uploaded), "gemm_pair order wait");
    table.upload_seen.store(true, std::memory_order_release);
  }
}

}  // namespace

// The device copy of the order (`policy`'s, for geometry g) for a launch on `stream`, which has
// been ordered after its upload. The current device is `device`.
const int4* order_table(const Geometry& g, Policy policy, bool tile_sync, int64_t lag, int device,
                        cudaStream_t stream) {
  const OrderKey key{device, g.m_blocks(), g.k, g.n0, g.n1, g.gated, g.block_m, g.split_k0, g.split_k1,
                     static_cast<int>(policy), tile_sync, policy == Policy::kOverlap ? lag : 0};
  OrderTable& table = find_or_add(order_cache().tables, key);
  if (table.upload_seen.load(std::memory_order_acquire)) return table.data;  // built, and on the device
  const c10::cuda::CUDAStreamCaptureModeGuard relaxed(cudaStreamCaptureModeRelaxed);
  if (!table.ready.load(std::memory_order_acquire)) {
    // Other threads needing this table wait here for one build; other tables are not held up.
    std::lock_guard<std::mutex> lock(table.mutex);
    if (!table.ready.load(std::memory_order_relaxed)) {
      build_and_upload(table, g, policy, tile_sync, lag, device);
      table.ready.store(true, std::memory_order_release);
    }
  }
  wait_for_upload(table, stream);
  return table.data;
}

}  // namespace cute_ops::gemm_pair
