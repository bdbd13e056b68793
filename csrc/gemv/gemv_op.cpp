// Torch glue for gemv: output allocation, launch, registration. The input rules are in
// gemv_checks.cpp, shared with the Meta impl.
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "common/arrival_counters.h"
#include "common/cuda_check.h"
#include "common/torch_utils.h"
#include "gemv/gemv.h"
#include "gemv/gemv_checks.h"

namespace cute_ops {

namespace {

// The fields of a launch that come with the weight [n, k]: m rows of x, `cols` outputs.
GemvParams weight_params(const at::Tensor& weight, const at::Tensor* norm_weight, double eps,
                         const std::string& activation, int64_t m, int64_t cols, const char* op) {
  GemvParams p{};
  p.weight = weight.data_ptr();
  p.norm_weight = norm_weight ? norm_weight->data_ptr() : nullptr;
  p.m = static_cast<int>(m);
  p.k = static_cast<int>(weight.size(1));
  p.n = static_cast<int>(weight.size(0));
  p.out_cols = static_cast<int>(cols);
  p.eps = static_cast<float>(eps);
  p.activation = activation == "swiglu" ? GemvActivation::kSwiGLU : GemvActivation::kNone;
  p.dtype = to_dtype(weight.scalar_type(), op, "weight");  // x's too (the checks compare them)
  return p;
}

// x and the residual, for the calls that read x from memory (gemv, gemv_push; a pull sums it).
void set_inputs(GemvParams& p, const at::Tensor& x, const std::optional<at::Tensor>& residual) {
  p.x = x.data_ptr();
  p.x_row_stride = x.stride(0);
  p.residual = residual ? residual->data_ptr() : nullptr;
  p.residual_row_stride = residual ? residual->stride(0) : 0;
}

at::Tensor gemv(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& norm_weight,
                double eps, const std::optional<at::Tensor>& residual, std::string activation) {
  const int64_t cols = check_gemv(x, weight, norm_weight, eps, residual, activation).expect_int();
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(0), cols}, x.options());
  GemvParams p = weight_params(weight, norm_weight ? &*norm_weight : nullptr, eps, activation, x.size(0), cols, "gemv");
  set_inputs(p, x, residual);
  p.out = out.data_ptr();
  const cudaStream_t stream = current_stream(x);
  GemvTileParams tiles;
  tiles.n_kt = static_cast<int>(gemv_tiles_n_kt(p, x.device().index()));
  at::Tensor partials;
  if (tiles.n_kt > 1) {  // the tiles' sums (any contents: each is written before it is read), and counters
    const int64_t units = gemv_tiles_units(p);
    partials = at::empty({units * tiles.n_kt * kGemvTileSlotFloats}, x.options().dtype(at::kFloat));
    tiles.partials = partials.data_ptr<float>();
    tiles.counters = arrival_counters(x.device().index(), stream, static_cast<size_t>(units));
  }
  if (tiles.n_kt > 0) {
    run_gemv(p, stream, {}, {}, tiles);
    return out;
  }
  GemvStreamKParams stream_k;
  stream_k.ctas = gemv_stream_k_ctas(p, x.device().index());
  if (stream_k.ctas > 0) {  // the pieces' words, zero and left zero (common/arrival_counters.h): 2 ints a word
    int* words = arrival_counters(x.device().index(), stream, static_cast<size_t>(2 * stream_k.ctas * kGemvPartWords));
    stream_k.parts = reinterpret_cast<uint64_t*>(words);
  }
  run_gemv(p, stream, {}, stream_k);
  return out;
}

// ---- tensor parallelism: the exchange (gemv_exchange.h)

GemvExchangeParams exchange_params(GemvExchangeMode mode, int64_t world, int64_t rank, int64_t slots, int64_t slot) {
  GemvExchangeParams e;
  e.mode = mode;
  e.world = static_cast<int>(world), e.rank = static_cast<int>(rank);
  e.slots = static_cast<int>(slots), e.slot = static_cast<int>(slot);
  return e;
}

at::Tensor gemv_pull(const at::Tensor& exchange, int64_t world, int64_t rank, int64_t slots, int64_t slot, int64_t m,
                     const at::Tensor& weight, const at::Tensor& norm_weight, double eps, std::string activation,
                     const std::optional<at::Tensor>& x_sum) {
  const int64_t cols = check_gemv_pull(exchange, world, rank, slots, slot, m, weight, norm_weight, eps, activation,
                                       x_sum).expect_int();
  const c10::cuda::CUDAGuard guard(weight.device());
  at::Tensor out = at::empty({m, cols}, weight.options());
  GemvParams p = weight_params(weight, &norm_weight, eps, activation, m, cols, "gemv_pull");
  p.out = out.data_ptr();
  GemvExchangeParams e = exchange_params(GemvExchangeMode::kPull, world, rank, slots, slot);
  e.buffers[rank] = exchange.data_ptr();  // a pull reads its own buffer only
  e.x_sum = x_sum ? x_sum->data_ptr() : nullptr;
  run_gemv(p, current_stream(weight), e);
  return out;
}

void gemv_push(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
               const at::Tensor& exchange, c10::IntArrayRef buffers, int64_t rank, int64_t slots, int64_t slot) {
  check_gemv_push(x, weight, residual, exchange, buffers, rank, slots, slot);
  TORCH_CHECK_VALUE(buffers[rank] == reinterpret_cast<int64_t>(exchange.data_ptr()),
                    "gemv_push: buffers[rank] must be this rank's exchange buffer");
  const c10::cuda::CUDAGuard guard(x.device());
  GemvParams p = weight_params(weight, nullptr, 0.0, "none", x.size(0), weight.size(0), "gemv_push");
  set_inputs(p, x, residual);
  const int64_t world = static_cast<int64_t>(buffers.size());
  GemvExchangeParams e = exchange_params(GemvExchangeMode::kPush, world, rank, slots, slot);
  for (int64_t r = 0; r < world; ++r) e.buffers[r] = reinterpret_cast<void*>(buffers[r]);
  run_gemv(p, current_stream(x), e);
}

// gemv, and its rows stored as the lines of the next peer_all_reduce call into every rank's peer
// workspace (gemv_exchange.h, kPushLines).
at::Tensor gemv_push_lines(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& residual,
                           const at::Tensor& workspace, c10::IntArrayRef workspaces, int64_t rank) {
  const int64_t cols = check_gemv_push_lines(x, weight, residual, workspace, workspaces, rank).expect_int();
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(0), cols}, x.options());
  GemvParams p = weight_params(weight, nullptr, 0.0, "none", x.size(0), cols, "gemv_push_lines");
  set_inputs(p, x, residual);
  p.out = out.data_ptr();
  GemvExchangeParams e;
  e.mode = GemvExchangeMode::kPushLines;
  e.world = static_cast<int>(workspaces.size()), e.rank = static_cast<int>(rank);
  for (int r = 0; r < e.world; ++r) e.buffers[r] = reinterpret_cast<void*>(workspaces[r]);
  run_gemv(p, current_stream(x), e);
  return out;
}

static_assert(sizeof(cudaIpcMemHandle_t) == kGemvIpcHandleBytes, "gemv_exchange.h's handle size");

// A rank's exchange buffer: its own cudaMalloc allocation (CUDA IPC maps whole allocations; the
// caching allocator's blocks are parts of larger ones), zeroed before any rank can see it.
at::Tensor gemv_exchange_buffer(const at::Tensor& like, int64_t slots, int64_t world, int64_t hidden) {
  const GemvExchangeLayout layout = check_gemv_exchange_buffer(like, slots, world, hidden);
  const c10::cuda::CUDAGuard guard(like.device());
  void* ptr = nullptr;
  check_cuda(cudaMalloc(&ptr, layout.bytes()), "gemv_exchange_buffer: cudaMalloc");
  check_cuda(cudaMemset(ptr, 0, layout.bytes()), "gemv_exchange_buffer: cudaMemset");
  check_cuda(cudaDeviceSynchronize(), "gemv_exchange_buffer: zeroing");  // (setup, not a step)
  return at::from_blob(ptr, {layout.bytes()}, [](void* q) { cudaFree(q); },
                       at::TensorOptions().dtype(at::kByte).device(like.device()));
}

// The CUDA IPC handle of a buffer from gemv_exchange_buffer, as CPU bytes for the other ranks.
at::Tensor gemv_exchange_handle(const at::Tensor& buffer) {
  check_gemv_exchange_handle(buffer);
  const c10::cuda::CUDAGuard guard(buffer.device());
  cudaIpcMemHandle_t handle;
  check_cuda(cudaIpcGetMemHandle(&handle, buffer.data_ptr()), "gemv_exchange_handle: cudaIpcGetMemHandle");
  at::Tensor out = at::empty({static_cast<int64_t>(sizeof(handle))}, at::kByte);
  std::memcpy(out.data_ptr(), &handle, sizeof(handle));
  return out;
}

// Another rank's buffer mapped into this process on this rank's device (`buffer`: its own, of the
// same size); unmapped when the returned tensor is freed.
at::Tensor gemv_exchange_open(const at::Tensor& buffer, const at::Tensor& handle) {
  check_gemv_exchange_open(buffer, handle);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data_ptr(), sizeof(h));
  const c10::cuda::CUDAGuard guard(buffer.device());
  void* ptr = nullptr;
  check_cuda(cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess), "gemv_exchange_open: cudaIpcOpenMemHandle");
  return at::from_blob(ptr, {buffer.numel()}, [](void* q) { cudaIpcCloseMemHandle(q); }, buffer.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(cute_ops, CUDA, m) {
  m.impl("gemv", &gemv);
  m.impl("gemv_pull", &gemv_pull);
  m.impl("gemv_push", &gemv_push);
  m.impl("gemv_push_lines", &gemv_push_lines);
  m.impl("gemv_exchange_buffer", &gemv_exchange_buffer);
  m.impl("gemv_exchange_handle", &gemv_exchange_handle);
  m.impl("gemv_exchange_open", &gemv_exchange_open);
}

}  // namespace cute_ops
