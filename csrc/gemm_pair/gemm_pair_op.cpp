// Torch glue for gemm_pair: checks, the tile config and K-split choice, the order table (built
// once per shape and device, then cached on the device), per-call workspace, launch, registration.
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/device_info.h"
#include "common/per_device.h"
#include "common/torch_utils.h"
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/tile_order.h"

namespace cute_ops {

namespace {

using gemm_pair::Activation;
using gemm_pair::Geometry;
using gemm_pair::Policy;

constexpr const char* kOp = "gemm_pair";

int auto_block_m(int64_t m) { return m <= 16 ? 16 : m <= 64 ? 64 : 128; }

// CTAs of a config that fit on an SM of `device` (the current device), for the K-splits and the
// overlap policy's lag: an occupancy query, made once per (device, config, dtype).
int ctas_per_sm(int device, int block_m, bool is_bf16) {
  static std::array<PerDeviceInt, 6> cache;
  const int config = (block_m == 16 ? 0 : block_m == 64 ? 1 : 2) * 2 + is_bf16;
  return cache[config].get(device, [&] { return std::max(1, gemm_pair_ctas_per_sm(block_m, is_bf16)); });
}

// ---- Order tables ----------------------------------------------------------------------------
// One per (device, geometry, policy), built on the host by the first call that needs it and kept
// on the device for the life of the process. That first call must not block its stream's work,
// nor break a CUDA graph being captured by it or by another thread (docs/gemm_pair.md, "The order
// upload"):
//   - the order goes through a pinned staging buffer and a private non-blocking stream, whose copy
//     records the table's `uploaded` event; the caller's stream waits for that event on the
//     device, never the host for the caller's stream;
//   - a stream that is being captured cannot depend on an event recorded outside its capture, so
//     a capturing caller waits for the event on the host instead: a small copy on an idle stream;
//   - device memory comes from cudaMalloc (a table outlives any graph's memory pool), and every
//     call that a global-mode capture counts as unsafe (cudaMalloc, cudaHostAlloc, event queries
//     and waits) runs with this thread in relaxed capture mode, so that it neither fails here nor
//     invalidates another thread's capture.

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
  const std::vector<gemm_pair::Entry> order = gemm_pair::build_order(g, policy, tile_sync, lag);
  const size_t bytes = order.size() * sizeof(gemm_pair::Entry);
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

void check_operand(const at::Tensor& t, const at::Tensor& a, const char* name) {
  check_half_operand(t, a, kOp, name, "a");
  TORCH_CHECK(t.dim() == 2, kOp, ": ", name, " must be 2-D, got shape ", t.sizes());
  check_aligned(t, 16, kOp, name);
}

at::Tensor gemm_pair_cuda(const at::Tensor& a, const at::Tensor& b0, const at::Tensor& b1,
                          const std::string& activation, const std::string& policy, const std::string& granularity,
                          int64_t split_k0, int64_t split_k1, int64_t block_m, int64_t lag, bool separate_launches) {
  check_operand(a, a, "a");
  check_operand(b0, a, "b0");
  check_operand(b1, a, "b1");
  const Activation act = gemm_pair::parse_activation(activation);
  const Policy pol = gemm_pair::parse_policy(policy);
  const bool tile_sync = gemm_pair::parse_granularity(granularity);
  const int64_t m = a.size(0), k = a.size(1), n0 = b0.size(0), n1 = b1.size(0);
  const bool gated = act == Activation::kSwiGLU;
  const int64_t h_width = gated ? n0 / 2 : n0;
  TORCH_CHECK(a.stride(1) == 1 && (a.size(0) == 1 || a.stride(0) % 8 == 0), kOp,
              ": a must have a contiguous last dim and a row stride that is a multiple of 8, got strides ",
              a.strides());
  TORCH_CHECK(b0.is_contiguous() && b1.is_contiguous(), kOp, ": b0 and b1 must be contiguous");
  TORCH_CHECK(b0.size(1) == k, kOp, ": b0 is [n0, k] with a's k (", k, "), got ", b0.sizes());
  TORCH_CHECK(k % 8 == 0 && k > 0, kOp, ": k must be a positive multiple of 8 (16-byte vectors), got ", k);
  TORCH_CHECK(n0 > 0 && n0 % (gated ? 16 : 8) == 0, kOp, ": b0's rows (n0) must be a positive multiple of ",
              gated ? "16 (swiglu: gate and up halves of a multiple of 8)" : "8", ", got ", n0);
  TORCH_CHECK(b1.size(1) == h_width, kOp, ": b1 is [n1, ", h_width, "] (the width of act(a b0^T)), got ", b1.sizes());
  TORCH_CHECK(n1 > 0 && n1 % 8 == 0, kOp, ": b1's rows (n1) must be a positive multiple of 8, got ", n1);
  TORCH_CHECK(block_m == 0 || gemm_pair_supports_block_m(static_cast<int>(block_m)), kOp,
              ": block_m must be 0 (automatic), 16, 64 or 128, got ", block_m);
  TORCH_CHECK(m <= (int64_t{1} << 30) && k <= (int64_t{1} << 30) && n0 <= (int64_t{1} << 30) && n1 <= (int64_t{1} << 30),
              kOp, ": sizes must fit in 32 bits");

  at::Tensor out = at::empty({m, n1}, a.options());
  if (m == 0) return out;
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaStream_t stream = current_stream(a);

  Geometry g;
  g.m = m, g.k = k, g.n0 = n0, g.n1 = n1, g.gated = gated;
  g.block_m = block_m ? static_cast<int>(block_m) : auto_block_m(m);
  g.block_n0 = g.block_n1 = kGemmPairBlockN;
  const int device = a.device().index();
  const int per_sm = ctas_per_sm(device, g.block_m, a.scalar_type() == at::kBFloat16);
  const int64_t slots = int64_t{device_info(device).sms} * per_sm;
  TORCH_CHECK(split_k0 < 0 || split_k0 % 8 == 0, kOp, ": split_k0 must be -1 (automatic), 0 (no split) or a "
              "multiple of 8, got ", split_k0);
  g.split_k0 = split_k0 < 0 ? gemm_pair::auto_split_k0(g, slots, per_sm) : split_k0;
  if (g.split_k0 >= k) g.split_k0 = 0;  // one split
  g.split_k1 = split_k1 < 0 ? gemm_pair::auto_split_k1(g, slots) : split_k1;
  if (g.split_k1 >= h_width) g.split_k1 = 0;  // one split
  TORCH_CHECK(g.split_k1 % g.h_cols_per_tile0() == 0, kOp, ": split_k1 must be -1 (automatic), 0 (no split) or a "
              "multiple of the ", g.h_cols_per_tile0(), " h columns a GEMM0 tile makes, got ", split_k1);
  // The overlap policy's lag counts GEMM0 tiles: by default the tiles whose splits fill the slots.
  const int64_t lag_used = lag < 0 ? std::max<int64_t>(1, slots / g.splits0()) : lag;
  // The two-launch control runs the sequential order's GEMM0 part, then its GEMM1 part.
  const int4* order =
      order_table(g, separate_launches ? Policy::kSequential : pol, tile_sync, lag_used, device, stream);

  const int64_t splits0 = g.splits0(), splits = g.splits();
  const int64_t n_ready = g.m_blocks() * (tile_sync ? splits : 1);
  const int64_t n_arrived0 = splits0 > 1 ? g.m_blocks() * g.n0_tiles() : 0;
  const int64_t n_arrived = splits > 1 ? g.m_blocks() * g.n1_tiles() : 0;
  at::Tensor counters = at::empty({2 + n_ready + n_arrived0 + n_arrived}, a.options().dtype(at::kInt));
  // Zeroed in the stream (a memset node in a CUDA graph), so every launch and replay starts fresh.
  check_cuda(cudaMemsetAsync(counters.data_ptr(), 0, counters.numel() * sizeof(int), stream), "gemm_pair counters");
  at::Tensor h = at::empty({m, h_width}, a.options());
  at::Tensor partials0, partials;
  if (splits0 > 1) partials0 = at::empty({splits0, m, n0}, a.options().dtype(at::kFloat));
  if (splits > 1) partials = at::empty({splits, m, n1}, a.options().dtype(at::kFloat));

  GemmPairParams p{};
  p.a = a.data_ptr(), p.b0 = b0.data_ptr(), p.b1 = b1.data_ptr(), p.h = h.data_ptr(), p.out = out.data_ptr();
  p.partials0 = splits0 > 1 ? partials0.data_ptr<float>() : nullptr;
  p.partials = splits > 1 ? partials.data_ptr<float>() : nullptr;
  p.order = order;
  int* c = counters.data_ptr<int>();
  p.ticket = c, p.ready = c + 2, p.arrived0 = c + 2 + n_ready, p.arrived = c + 2 + n_ready + n_arrived0;
  p.lda = a.stride(0);
  p.m = static_cast<int>(m), p.k = static_cast<int>(k), p.n0 = static_cast<int>(n0), p.n1 = static_cast<int>(n1);
  p.h_width = static_cast<int>(h_width);
  p.num_tiles = static_cast<int>(g.num_tiles());
  p.n0_tiles = static_cast<int>(g.n0_tiles()), p.n1_tiles = static_cast<int>(g.n1_tiles());
  p.splits0 = static_cast<int>(splits0), p.split_k0 = static_cast<int>(g.k0_cols());
  p.splits = static_cast<int>(splits), p.split_k1 = static_cast<int>(g.k1_cols());
  p.activation = static_cast<int>(act);
  p.tile_sync = tile_sync;
  p.is_bf16 = a.scalar_type() == at::kBFloat16;
  p.wait = true;
  if (!separate_launches) {
    run_gemm_pair(p, g.block_m, stream);
    return out;
  }
  // The same tiles as two launches ordered by the stream: what the fused launch is measured against.
  const int gemm0_tiles = static_cast<int>(g.m_blocks() * g.n0_tiles() * splits0);
  GemmPairParams first = p;
  first.num_tiles = gemm0_tiles;
  run_gemm_pair(first, g.block_m, stream);
  GemmPairParams second = p;
  second.order = p.order + gemm0_tiles;
  second.num_tiles = p.num_tiles - gemm0_tiles;
  second.ticket = c + 1;
  second.wait = false;
  run_gemm_pair(second, g.block_m, stream);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) { m.impl("gemm_pair", &gemm_pair_cuda); }

}  // namespace cute_ops
