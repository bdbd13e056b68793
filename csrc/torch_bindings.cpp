// Every op's schema, in one place. Each op family registers its CUDA implementation next to its
// launcher (csrc/<family>/*_op.cpp) and its Meta impl next to its input rules
// (csrc/<family>/<family>_checks.cpp, in every build), so a build of a subset of families, or a
// CPU-only build (schemas, checks and Meta impls), needs no conditional code here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/peer_layout.h"
#include "common/registration.h"
#include "flash_decode/flash_decode_supported.h"
#include "flash_fwd/flash_fwd_supported.h"
#include "gemm_pair/gemm_pair_supported.h"
#include "gemm_pair/tile_order.h"

namespace {

// The tile order gemm_pair's kernel reads, as an int32 [tiles, 4] CPU tensor of (gemm, m block,
// n tile, K-split): host code, so it is in every build, and tests compare it with the Python
// model (cute_ops/gemm_pair_schedule.py).
at::Tensor gemm_pair_order(int64_t m, int64_t k, int64_t n0, int64_t n1, const std::string& activation,
                           const std::string& policy, const std::string& granularity, int64_t block_m, int64_t split_k0,
                           int64_t split_k1, int64_t lag) {
  using namespace cute_ops::gemm_pair;
  Geometry g;
  g.m = m, g.k = k, g.n0 = n0, g.n1 = n1, g.gated = parse_activation(activation) == Activation::kSwiGLU;
  g.block_m = static_cast<int>(block_m);
  g.split_k0 = split_k0, g.split_k1 = split_k1;
  TORCH_CHECK(block_m > 0, "gemm_pair_order: block_m must be positive");
  const std::vector<Entry> order = build_order(g, parse_policy(policy), parse_granularity(granularity), lag);
  at::Tensor t = at::empty({static_cast<int64_t>(order.size()), 4}, at::kInt);
  std::memcpy(t.data_ptr(), order.data(), order.size() * sizeof(Entry));
  return t;
}

// What each CuTe family has kernels for (dtypes, head dims, block_m, ... and by architecture), as
// JSON: {"flash_fwd": {...}, ...}. The sets are generated with the instantiations
// (csrc/generate_instantiations.py); cute_ops/_library.py reads them once at import, so Python
// restates none. Host code, in every build: a CPU-only build reports what a CUDA build would run.
std::string supported_configs() {
  namespace s = cute_ops::supported;
  std::string json = "{";
  for (auto [family, sets] : {std::pair{s::flash_fwd::kFamily, s::flash_fwd::kJson},
                              {s::flash_decode::kFamily, s::flash_decode::kJson},
                              {s::gemm_pair::kFamily, s::gemm_pair::kJson}}) {
    json += (json.size() > 1 ? ", \"" : "\"") + std::string(family) + "\": " + sets;
  }
  return json + "}";
}

}  // namespace

TORCH_LIBRARY(cute_ops, m) {
  // ---- supported configurations (generated: csrc/<family>/<family>_supported.h) ------------
  m.def("supported_configs() -> str", &supported_configs);

  // ---- device-side errors (csrc/common/device_errors.*; cute_ops/errors.py) --------------------
  // Bad lengths, pages or positions found on the device are recorded per device ("record" mode)
  // or trap ("trap", for debugging). device_errors returns [reports, op, code, sequence, value,
  // aux, aux2] of one device's status; wait synchronises the device first; reset zeroes it.
  m.def("device_errors(int device, bool wait=True, bool reset=True) -> int[]");
  m.def("set_device_error_mode(str mode) -> ()");
  m.def("get_device_error_mode() -> str");

  // ---- norm (csrc/norm) -------------------------------------------------------------------
  // out = x / sqrt(mean(x^2) + eps) * weight, over the last dim.
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  // residual += x (in place); out = rms_norm(residual, weight, eps).
  m.def("fused_add_rms_norm(Tensor x, Tensor(a!) residual, Tensor weight, float eps) -> Tensor");

  // ---- gemv (csrc/gemv) -------------------------------------------------------------------
  // out = act(x' @ weight^T) (+ residual) for x [m <= 8, k], weight [n, k]: x' = rms_norm(x,
  // norm_weight, eps) when norm_weight is given, else x; activation "none" or "swiglu" (weight
  // packed by pack_gate_up, out [m, n / 2]); residual [m, out cols] added after rounding.
  m.def("gemv(Tensor x, Tensor weight, Tensor? norm_weight=None, float eps=1e-06, Tensor? residual=None, "
        "str activation=\"none\") -> Tensor");
  // Tensor parallelism (gemv/gemv_exchange.h): the all-reduce between a row-parallel projection
  // and the next one, folded into both. gemv_push: out = x @ weight^T (+ residual) stored into slot
  // `slot` of every rank's exchange buffer (buffers: their addresses in this process, this rank's
  // at [rank]). gemv_pull: gemv over x = the sum of the slot's pushed [m, k] rows, once every rank
  // has pushed them; x_sum, when given, receives that sum. gemv_exchange_buffer allocates a rank's
  // buffer (zeroed) for `slots` slots of `hidden` columns of like's dtype; gemv_exchange_handle and
  // gemv_exchange_open map it into the other ranks' processes (CUDA IPC).
  m.def("gemv_push(Tensor x, Tensor weight, Tensor? residual, Tensor(a!) exchange, int[] buffers, int rank, "
        "int slots, int slot) -> ()");
  m.def("gemv_pull(Tensor(a!) exchange, int world, int rank, int slots, int slot, int m, Tensor weight, "
        "Tensor norm_weight, float eps, str activation=\"none\", Tensor(b!)? x_sum=None) -> Tensor");
  m.def("gemv_exchange_buffer(Tensor like, int slots, int world, int hidden) -> Tensor");
  m.def("gemv_exchange_handle(Tensor buffer) -> Tensor");
  m.def("gemv_exchange_open(Tensor buffer, Tensor handle) -> Tensor");
  // gemv_push_lines: out = x @ weight^T (+ residual), as gemv, and out's rows stored as the lines of
  // this rank's next peer_all_reduce call into every rank's peer workspace (workspace, workspaces and
  // rank as peer_all_reduce's; gemv/gemv_exchange.h, kPushLines). That call, on out with
  // pushed=True, then sums the ranks' rows into out without reading them first.
  m.def("gemv_push_lines(Tensor x, Tensor weight, Tensor? residual, Tensor(a!) workspace, int[] workspaces, "
        "int rank) -> Tensor");

  // ---- allreduce (csrc/allreduce) ---------------------------------------------------------
  // x (in place) = the sum of x over the ranks of one host, for tensors of at most 1 MiB (a decode
  // step's rows; allreduce/peer_all_reduce.h). workspace: this rank's, of
  // peer_all_reduce_workspace_bytes(world) bytes, zeroed, mapped by every rank; workspaces: every
  // rank's workspace's address in this process (this rank's at [rank]). pushed: every rank's
  // gemv_push_lines already stored its rows as this call's lines; x's values are not read, x
  // receives the sum (x: that gemv's output).
  m.def("peer_all_reduce(Tensor(a!) x, Tensor(b!) workspace, int[] workspaces, int rank, bool pushed=False) -> ()");
  m.def("peer_all_reduce_workspace_bytes(int world) -> int", [](int64_t world) {
    return cute_ops::PeerLayout{world}.bytes();
  });
  m.def("peer_all_reduce_max_bytes() -> int", []() { return cute_ops::kPeerMaxBytes; });

  // ---- rope (csrc/rope) -------------------------------------------------------------------
  // Rotate-half RoPE applied in place to q [..., Hq, D] and k [..., Hkv, D] at `positions`;
  // cos_sin_cache [max_position, rot_dim] holds cos in its first rot_dim/2 columns, sin after.
  m.def("rotary_embedding(Tensor(a!) q, Tensor(b!) k, Tensor positions, Tensor cos_sin_cache) -> ()");

  // ---- flash_fwd (csrc/flash_fwd) ---------------------------------------------------------
  // Exact attention, FlashAttention-2 forward. q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (last dim
  // contiguous, Hq a multiple of Hkv, D in {64, 96, 128, 256}, fp16/bf16). Returns out [B, Sq, Hq, D]
  // (contiguous) and lse [B, Hq, Sq] float32. softmax_scale defaults to 1/sqrt(D). causal aligns
  // the diagonal bottom-right: query i sees keys j <= i + Sk - Sq. A query that sees no key gets
  // out = 0 and lse = -inf. arch: the kernel's kind, "auto" (the op's choice, stated in
  // flash_fwd/flash_fwd.cu), "sm80" (mma.sync, cp.async) or "sm90" (wgmma, TMA; 9.x only).
  m.def("flash_fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False, str arch=\"auto\") "
        "-> (Tensor, Tensor)");
  // Packed variable-length batch: q [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence b spans
  // rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] (int32 [B + 1]); max_seqlen_* bound every length.
  // Returns out [total_q, Hq, D] and lse [Hq, total_q] float32. arch: as for flash_fwd.
  m.def("flash_fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
        "int max_seqlen_q, int max_seqlen_k, float? softmax_scale=None, bool causal=False, str arch=\"auto\") "
        "-> (Tensor, Tensor)");

  // ---- flash_decode (csrc/flash_decode) ---------------------------------------------------
  // Split-KV attention of 1..16 new tokens a sequence over a KV cache. q [B, Sq, Hq, D]; cache
  // contiguous [B, capacity, Hkv, D], or paged [num_pages, page_size, Hkv, D] with block_table
  // int32 [B, max_pages]; cache_seqlens int32 [B] keys already cached. With k_new/v_new
  // [B, Sq, Hkv, D] the op first writes them into the caches at cache_seqlens[b] (rotating q and
  // k_new by rotate-half RoPE at those positions when rotary_cos/rotary_sin [positions, rot/2] are
  // given) and attends over cache_seqlens[b] + Sq keys; the caller advances cache_seqlens. causal
  // masks within the new tokens (bottom-right). num_splits = 0 picks the split count, -1 the count
  // for one sequence whatever the batch (batch-invariant rows). An fp8
  // cache (float8_e4m3fn, D 128) holds k / k_scale and v / v_scale, float32 scales [Hkv] or one.
  // Returns out [B, Sq, Hq, D] and lse [B, Hq, Sq] float32.
  m.def("flash_decode(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor cache_seqlens, Tensor? k_new=None, "
        "Tensor? v_new=None, Tensor? block_table=None, Tensor? rotary_cos=None, Tensor? rotary_sin=None, "
        "float? softmax_scale=None, bool causal=True, int num_splits=0, Tensor? k_scale=None, Tensor? v_scale=None) "
        "-> (Tensor, Tensor)");

  // ---- gemm_pair (csrc/gemm_pair) ---------------------------------------------------------
  // out = act(a @ b0^T) @ b1^T in one launch (docs/gemm_pair.md). a [m, k], b0 [n0, k], b1 [n1, h]
  // (nn.Linear layout), fp16/bf16; k, n1 multiples of 8. activation "swiglu" (b0 from
  // pack_gate_up: h = silu(gate) * up, h = n0 / 2), "gelu" (erf) or "none" (h = n0). policy:
  // "sequential", "row_interleaved" or "overlap" (tile order); granularity "tile" or "row" (what a
  // GEMM1 tile waits for). split_k0 / split_k1: K columns a GEMM0 split reads / h columns a GEMM1
  // split reads (-1 automatic, 0 no split);
  // block_m: 0 automatic, 16, 64, 128 or 256 (sm90 only); lag: the overlap policy's (-1: the CTAs that fit at once).
  // separate_launches: the same tiles as two stream-ordered launches (the scheduler's control).
  // arch: the kernels' kind, "auto" (the op's choice, stated under `arch` in cute_ops.gemm_pair),
  // "sm80" (mma.sync, cp.async) or "sm90" (wgmma, TMA; 9.x only).
  m.def("gemm_pair(Tensor a, Tensor b0, Tensor b1, str activation=\"swiglu\", str policy=\"sequential\", "
        "str granularity=\"tile\", int split_k0=-1, int split_k1=-1, int block_m=0, int lag=-1, "
        "bool separate_launches=False, str arch=\"auto\") -> Tensor");
  // silu(gate) * up of a gate/up product [..., 2 * inter] whose columns are in pack_gate_up's
  // order (the activation of a LLaMA MLP whose gate/up matmul ran elsewhere) -> [..., inter].
  m.def("swiglu(Tensor gate_up) -> Tensor");
  // The order table gemm_pair's kernel reads (host code, a CPU tensor), for tests and inspection.
  m.def("gemm_pair_order(int m, int k, int n0, int n1, str activation, str policy, str granularity, int block_m, "
        "int split_k0, int split_k1, int lag) -> Tensor",
        &gemm_pair_order);
  // Test support (csrc/gemm_pair/hold_sms.h): launches num_ctas CTAs that each fill an SM's shared
  // memory, count themselves in control[0] (int32) and wait until control[1] != 0.
  m.def("_hold_sms(Tensor(a!) control, int num_ctas) -> ()");
}

CUTE_OPS_REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
