// Per-tile timeline of flash_fwd's SM90 kernel on one call (bf16, head dim 64 or 128, every head
// its own kv head): for each tile a consumer warp group computes, the global timer when its Q had
// landed, when its first S was issued, when its last P V was complete and when its epilogue was
// done (csrc/flash_fwd/trace_sm90.h), as percentiles of each phase and of the gap from a tile's
// epilogue to the next tile's Q. Where a tile's cost beyond its key blocks goes (issue 16;
// docs/perf-notes.md, sessions 54-55; build knobs with -D as the extension does). Needs a GPU;
// not part of the extension:
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math -DNDEBUG \
//        -gencode=arch=compute_90a,code=sm_90a -Icsrc -Ithird_party/cutlass/include \
//        perf/tools/flash_fwd_timeline.cu -o build/flash_fwd_timeline [-DCUTE_OPS_FLASH_FWD_SM90_...=1]
//   build/flash_fwd_timeline D SEQLEN BATCH HEADS CAUSAL     e.g. 64 512 32 32 1 (the grid's D 64 512 causal)
#define CUTE_OPS_FLASH_FWD_TRACE
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flash_fwd/flash_fwd_launch_sm90.h"

using namespace cute_ops;
using Bf16 = cutlass::bfloat16_t;

// The library's counters come from a per-(device, stream) pool that needs torch
// (common/arrival_counters.cpp); one zeroed set serves this tool's single stream, which the
// kernel leaves zeroed after each launch (the contract of common/arrival_counters.h).
namespace cute_ops {
int* arrival_counters(int, cudaStream_t, size_t count) {
  static int* counters = nullptr;
  static size_t have = 0;
  if (have < count) {
    cudaMalloc(&counters, count * sizeof(int));
    cudaMemset(counters, 0, count * sizeof(int));
    cudaDeviceSynchronize();
    have = count;
  }
  return counters;
}
}  // namespace cute_ops

// Uniform in [-1.7, 1.7) (about unit variance) from a hash of the index.
__global__ void fill(Bf16* x, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = Bf16(((h & 0xffffff) / 16777216.f - 0.5f) * 3.4f);
  }
}

static void print_spread(const char* name, std::vector<double> x) {
  if (x.empty()) return;
  std::sort(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += v;
  printf("  %-24s n %6zu  mean %6.3f  p10 %6.3f  p50 %6.3f  p90 %6.3f  max %7.3f us\n", name, x.size(),
         sum / x.size(), x[x.size() / 10], x[x.size() / 2], x[x.size() * 9 / 10], x.back());
}

template <int kHeadDim, bool kIsCausal>
static void run(const FlashFwdParams& p, cudaStream_t st) {
  run_flash_fwd_sm90_<Bf16, kHeadDim, kIsCausal>(p, st);
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s D SEQLEN BATCH HEADS CAUSAL\n", argv[0]);
    return 2;
  }
  const int D = atoi(argv[1]), S = atoi(argv[2]), B = atoi(argv[3]), H = atoi(argv[4]);
  const bool causal = atoi(argv[5]) != 0;
  if (D != 64 && D != 128) {
    fprintf(stderr, "D: 64 or 128\n");
    return 2;
  }
  const size_t n = (size_t)B * S * H * D;
  Bf16 *q, *k, *v, *o;
  float* lse;
  cudaMalloc(&q, n * 2); cudaMalloc(&k, n * 2); cudaMalloc(&v, n * 2); cudaMalloc(&o, n * 2);
  cudaMalloc(&lse, (size_t)B * H * S * 4);
  fill<<<1024, 256>>>(q, n, 1); fill<<<1024, 256>>>(k, n, 2); fill<<<1024, 256>>>(v, n, 3);

  FlashFwdParams p = {};
  p.q = q; p.k = k; p.v = v; p.o = o; p.lse = lse;
  const int64_t row = (int64_t)H * D, batch = (int64_t)S * H * D;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = batch;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = D;
  p.lse_batch_stride = (int64_t)H * S; p.lse_head_stride = S;
  p.total_q = p.total_k = B * S;
  p.b = B; p.h = H; p.h_k = H; p.d = D; p.seqlen_q = p.seqlen_k = S;
  p.scale_softmax = 1.f / std::sqrt((float)D);
  p.scale_softmax_log2 = p.scale_softmax * 1.4426950408889634f;
  p.is_causal = causal; p.is_bf16 = true;

  cudaStream_t st;
  cudaStreamCreate(&st);
  auto launch = [&] {
    if (D == 64) causal ? run<64, true>(p, st) : run<64, false>(p, st);
    else causal ? run<128, true>(p, st) : run<128, false>(p, st);
  };
  for (int i = 0; i < 5; ++i) launch();  // warm-up (and the shared-memory opt-in)
  cudaStreamSynchronize(st);

  using flash::kFwdTraceCtas;
  using flash::kFwdTraceGroups;
  using flash::kFwdTraceTiles;
  const size_t slots = (size_t)kFwdTraceCtas * kFwdTraceTiles * kFwdTraceGroups * 4;
  std::vector<unsigned long long> tr(slots, 0);
  cudaMemcpyToSymbol(g_fwd_trace, tr.data(), slots * 8);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0, st);
  launch();
  cudaEventRecord(e1, st);
  cudaStreamSynchronize(st);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  const cudaError_t err = cudaGetLastError();
  cudaMemcpyFromSymbol(tr.data(), g_fwd_trace, slots * 8);

  const double flops = 4.0 * B * H * (double)S * S * D / (causal ? 2 : 1);
  printf("D %d S %d B %d H %d %s: %.1f us, %.0f TFLOP/s (%s)\n", D, S, B, H, causal ? "causal" : "non-causal",
         ms * 1e3, flops / (ms * 1e-3) / 1e12, cudaGetErrorString(err));
  // Phases of every traced tile, each group alike; a slot's probes are 0 where not reached (the
  // last slot of a CTA only has its Q wait: the end of the tiles).
  std::vector<double> to_s, mainloop, epilogue, gap, tile;
  unsigned long long first = ~0ull, last = 0;
  int ctas = 0;
  for (int c = 0; c < kFwdTraceCtas; ++c) {
    bool any = false;
    for (int g = 0; g < kFwdTraceGroups; ++g) {  // (a CTA of two groups leaves the third's slots 0)
      for (int t = 0; t < kFwdTraceTiles; ++t) {
        const unsigned long long* x = &tr[((size_t)(c * kFwdTraceTiles + t) * kFwdTraceGroups + g) * 4];
        if (x[0] == 0) break;
        any = true;
        first = std::min(first, x[0]);
        if (x[3] == 0) break;  // the end of this CTA's tiles
        last = std::max(last, x[3]);
        to_s.push_back((x[1] - x[0]) / 1e3);
        mainloop.push_back((x[2] - x[1]) / 1e3);
        epilogue.push_back((x[3] - x[2]) / 1e3);
        if (t + 1 < kFwdTraceTiles) {
          const unsigned long long* y = x + kFwdTraceGroups * 4;  // the group's next slot
          if (y[0] != 0) {
            gap.push_back((y[0] - x[3]) / 1e3);
            tile.push_back((y[0] - x[0]) / 1e3);
          }
        }
      }
    }
    ctas += any;
  }
  printf("  %d CTAs traced, first Q to last epilogue %.1f us\n", ctas, (last - first) / 1e3);
  print_spread("Q landed -> first S", to_s);
  print_spread("first S -> last P V done", mainloop);
  print_spread("last P V -> epilogue done", epilogue);
  print_spread("epilogue -> next Q", gap);
  print_spread("tile (Q to next Q)", tile);
  if (!causal) {
    const double blocks = std::ceil(S / 128.0);  // the kernels' key block is 128 wide
    std::vector<double> per_block;
    for (double m : mainloop) per_block.push_back(m / blocks);
    print_spread("mainloop per key block", per_block);
  }
  return err == cudaSuccess ? 0 : 1;
}
