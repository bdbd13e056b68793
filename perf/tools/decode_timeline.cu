// Per-CTA timeline of flash_decode's kernels on a contiguous or paged bf16 cache (Hq 32, Hkv 8,
// D 128, one token): the global timer at entry, after the PDL wait, when the first tile landed, when the
// main loop ended and at the end of each CTA (the last split's merge included); next to a plain
// read of the same K and V bytes. How the epilogue, merge and ramp costs in docs/perf-notes.md
// were found. Needs a GPU; not part of the extension:
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr --use_fast_math -DNDEBUG \
//        -gencode=arch=compute_90a,code=sm_90a -Icsrc -Ithird_party/cutlass/include \
//        perf/tools/decode_timeline.cu -o build/decode_timeline
//   build/decode_timeline BATCH LENGTH SPLITS FLUSH [PAGE [RUNS]]
// FLUSH: 0 memset (dirty L2), 1 read, 2 none. PAGE: rows a page (a multiple of 16 dividing LENGTH):
// the sequences' pages shuffled over the pool, as perf/cases_decode.py's paged cases; 0: contiguous.
// RUNS > 0: the benchmark's conditions instead of single launches after a flush (FLUSH unused): a
// CUDA graph of RUNS launches, each over its own q, cache, lengths and block table, chained by
// programmatic dependent launch as perf/harness.py replays the op; the phases of runs 1.. are
// summed up, each from its own first CTA's entry, with the hand-over from the run before.
#define CUTE_OPS_DECODE_TRACE
// Which run of a graph a launch is (its trace slots are that run's): run r writes its lse at
// g_trace_lse0 + r * (b * h * sq); single launches are run 0.
__device__ float* g_trace_lse0;
#define CUTE_OPS_DECODE_TRACE_RUN(p) static_cast<int>(((p).lse - g_trace_lse0) / ((p).b * (p).h * (p).sq))
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <cuda_bf16.h>
#include "flash_decode/flash_decode_launch.h"

using namespace cute_ops;

__global__ void read_kernel(const int4* p, size_t n, int* out) {
  int acc = 0;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x;
  if (acc == 0x12345678) out[0] = acc;
}

// Percentiles of x (sorted here) as one line.
static void print_spread(const char* name, std::vector<double> x) {
  if (x.empty()) return;
  std::sort(x.begin(), x.end());
  printf("  %-13s min %6.2f p10 %6.2f p50 %6.2f p90 %6.2f max %6.2f\n", name, x[0], x[x.size() / 10], x[x.size() / 2],
         x[x.size() * 9 / 10], x.back());
}

// RUNS launches in a CUDA graph, each over its own inputs (the cache bytes of `base`, copied),
// replayed; the phases of runs 1.. (run 0 follows whatever ran before the replay).
static int graph_mode(FlashDecodeParams base, int runs, size_t cache_elems, size_t table_entries, cudaStream_t st) {
  const int B = base.b, H = base.h, D = base.d;
  float* lse;
  cudaMalloc(&lse, (size_t)runs * B * H * 4);
  cudaMemcpyToSymbol(g_trace_lse0, &lse, sizeof(lse));
  std::vector<FlashDecodeParams> ps(runs, base);
  for (int r = 0; r < runs; ++r) {
    FlashDecodeParams& p = ps[r];
    void *q, *k, *v, *o; int *lens, *table = nullptr;
    cudaMalloc(&q, (size_t)B * H * D * 2); cudaMalloc(&o, (size_t)B * H * D * 2);
    cudaMalloc(&k, cache_elems * 2); cudaMalloc(&v, cache_elems * 2);
    cudaMemcpy(q, base.q, (size_t)B * H * D * 2, cudaMemcpyDeviceToDevice);
    cudaMemcpy(k, base.k_cache, cache_elems * 2, cudaMemcpyDeviceToDevice);
    cudaMemcpy(v, base.v_cache, cache_elems * 2, cudaMemcpyDeviceToDevice);
    cudaMalloc(&lens, B * 4);
    cudaMemcpy(lens, base.cache_seqlens, B * 4, cudaMemcpyDeviceToDevice);
    if (base.block_table != nullptr) {
      cudaMalloc(&table, table_entries * 4);
      cudaMemcpy(table, base.block_table, table_entries * 4, cudaMemcpyDeviceToDevice);
    }
    p.q = q; p.o = o; p.k_cache = k; p.v_cache = v; p.cache_seqlens = lens; p.block_table = table;
    p.lse = lse + (size_t)r * B * H;
  }
  run_flash_decode_<cutlass::bfloat16_t, 128>(ps[0], st);  // one-time set-up (shared memory opt-in) outside the capture
  cudaStreamSynchronize(st);
  cudaGraph_t graph; cudaGraphExec_t exec;
  cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  for (int r = 0; r < runs; ++r) run_flash_decode_<cutlass::bfloat16_t, 128>(ps[r], st);
  cudaStreamEndCapture(st, &graph);
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    fprintf(stderr, "graph: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  const int nblk = base.h_k * base.num_splits * B;
  std::vector<unsigned long long> tr((size_t)runs * nblk * 8);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int it = 0; it < 8; ++it) {
    cudaEventRecord(e0, st);
    cudaGraphLaunch(exec, st);
    cudaEventRecord(e1, st);
    cudaStreamSynchronize(st);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("B%d L%zu s%d %s, graph of %d: %.2f us a launch\n", B, cache_elems / ((size_t)B * base.h_k * D),
           base.num_splits, base.block_table ? "paged" : "contiguous", runs, ms * 1e3 / runs);
    if (it < 7) continue;
    cudaMemcpyFromSymbol(tr.data(), g_decode_trace, tr.size() * 8);
    // Each run's phases from its first entry; a CTA with no keys (more splits than tiles) leaves
    // probe 2 and 3 unwritten, so a probe outside its run's [entry, end] is left out.
    std::vector<double> c[5], span, handover;
    unsigned long long prev_end = 0;
    for (int r = 0; r < runs; ++r) {
      const unsigned long long* t = tr.data() + (size_t)r * nblk * 8;
      unsigned long long t0 = ~0ull, tend = 0, first_wait = ~0ull;
      for (int b = 0; b < nblk; ++b) {
        t0 = std::min(t0, t[b * 8]);
        tend = std::max(tend, t[b * 8 + 4]);
        first_wait = std::min(first_wait, t[b * 8 + 1]);
      }
      if (r > 0) {
        span.push_back((tend - prev_end) / 1e3);
        handover.push_back(((double)first_wait - (double)prev_end) / 1e3);
        for (int b = 0; b < nblk; ++b)
          for (int i = 0; i < 5; ++i)
            if (t[b * 8 + i] >= t0 && t[b * 8 + i] <= tend) c[i].push_back((t[b * 8 + i] - t0) / 1e3);
      }
      prev_end = tend;
    }
    print_spread("run end-end", span);
    print_spread("wait-release", handover);  // the first CTA past its wait, after the run before ended
    const char* nm[5] = {"entry", "after-wait", "tile0-landed", "loop-done", "end"};
    for (int i = 0; i < 5; ++i) print_spread(nm[i], c[i]);
  }
  cudaError_t err = cudaGetLastError(); printf("err %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s BATCH LENGTH SPLITS FLUSH [PAGE [RUNS]]\n", argv[0]);
    return 2;
  }
  int B = atoi(argv[1]), L = atoi(argv[2]), splits = atoi(argv[3]);
  const int H = 32, HK = 8, D = 128;
  size_t cache_elems = (size_t)B * L * HK * D;
  void *q, *k, *v, *o; float *lse, *op, *lp; int* lens;
  cudaMalloc(&q, (size_t)B * H * D * 2); cudaMalloc(&k, cache_elems * 2); cudaMalloc(&v, cache_elems * 2);
  cudaMemset(q, 0x3c, (size_t)B * H * D * 2);
  cudaMemset(k, 0x3c, cache_elems * 2);
  cudaMemset(v, 0x3c, cache_elems * 2);
  cudaMalloc(&o, (size_t)B * H * D * 2); cudaMalloc(&lse, B * H * 4);
  cudaMalloc(&op, (size_t)splits * B * H * D * 4); cudaMalloc(&lp, (size_t)splits * B * H * 4);
  cudaMalloc(&lens, B * 4);
  int* counters; cudaMalloc(&counters, B * HK * 4); cudaMemset(counters, 0, B * HK * 4);  // left zero by each launch
  std::vector<int> hl(B, L); cudaMemcpy(lens, hl.data(), B * 4, cudaMemcpyHostToDevice);
  void* flush; size_t fl = 256 << 20; cudaMalloc(&flush, fl);
  FlashDecodeParams p = {};
  p.q = q; p.q_batch_stride = H * D; p.q_row_stride = H * D; p.q_head_stride = D;
  p.k_cache = k; p.v_cache = v;
  p.k_page_stride = p.v_page_stride = (size_t)L * HK * D; p.k_row_stride = p.v_row_stride = HK * D;
  p.k_head_stride = p.v_head_stride = D; p.block_table = nullptr; p.max_pages = 1; p.page_size = L; p.num_pages = B;
  const int page = argc > 5 ? atoi(argv[5]) : 0;
  if (page > 0) {  // the same bytes as pages of `page` rows, each sequence's pages scattered over the pool
    if (page % 16 != 0 || L % page != 0) {
      fprintf(stderr, "PAGE must be a multiple of 16 that divides LENGTH\n");
      return 2;
    }
    const int per_seq = L / page, pool = B * per_seq;
    std::vector<int> table(pool);
    for (int i = 0; i < pool; ++i) table[i] = i;
    std::shuffle(table.begin(), table.end(), std::mt19937(1234));
    int* d_table;
    cudaMalloc(&d_table, pool * 4);
    cudaMemcpy(d_table, table.data(), pool * 4, cudaMemcpyHostToDevice);
    p.block_table = d_table; p.block_table_stride = per_seq; p.max_pages = per_seq;
    p.k_page_stride = p.v_page_stride = (size_t)page * HK * D; p.page_size = page; p.num_pages = pool;
  }
  p.cache_seqlens = lens; p.seqlen_new = 0;
  p.o = o; p.o_batch_stride = H * D; p.o_row_stride = H * D; p.o_head_stride = D; p.lse = lse;
  p.o_partial = op; p.lse_partial = lp; p.split_counters = counters;
  p.b = B; p.sq = 1; p.h = H; p.h_k = HK; p.d = D; p.num_splits = splits;
  p.scale_softmax = 0.088f; p.scale_softmax_log2 = 0.088f * 1.4427f; p.causal = true; p.is_bf16 = true;
  p.pdl = true;
  cudaStream_t st; cudaStreamCreate(&st);
  cudaMemcpyToSymbol(g_trace_lse0, &lse, sizeof(lse));  // single launches: run 0
  const int runs = argc > 6 ? atoi(argv[6]) : 0;
  if (runs > 0) return graph_mode(p, runs, cache_elems, page > 0 ? (size_t)B * (L / page) : 0, st);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  const int nblk = HK * splits * B;
  std::vector<unsigned long long> tr(nblk * 8);
  const int flush_mode = atoi(argv[4]);  // 0 memset (dirty L2), 1 read (clean L2), 2 none
  for (int rep = 0; rep < 3; ++rep) {
    float best = 1e9;
    for (int it = 0; it < 5; ++it) {
      if (flush_mode == 0) cudaMemsetAsync(flush, it, fl, st);
      if (flush_mode == 1) read_kernel<<<132 * 8, 256, 0, st>>>((const int4*)flush, fl / 16, (int*)o);
      cudaEventRecord(e0, st);
      read_kernel<<<132 * 8, 256, 0, st>>>((const int4*)k, cache_elems * 2 / 16, (int*)o);
      read_kernel<<<132 * 8, 256, 0, st>>>((const int4*)v, cache_elems * 2 / 16, (int*)o);
      cudaEventRecord(e1, st);
      cudaStreamSynchronize(st);
      float ms; cudaEventElapsedTime(&ms, e0, e1); best = std::min(best, ms);
    }
    printf("pure read of K and V (two kernels), flush mode %d: %.1f us, %.2f TB/s\n", flush_mode, best * 1e3, 2.0 * cache_elems * 2 / (best * 1e6));
  }
  for (int it = 0; it < 6; ++it) {
    if (flush_mode == 0) cudaMemsetAsync(flush, it, fl, st);
    if (flush_mode == 1) read_kernel<<<132 * 8, 256, 0, st>>>((const int4*)flush, fl / 16, (int*)o);
    cudaEventRecord(e0, st);
    run_flash_decode_<cutlass::bfloat16_t, 128>(p, st);
    cudaEventRecord(e1, st);
    cudaStreamSynchronize(st);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    cudaMemcpyFromSymbol(tr.data(), g_decode_trace, nblk * 8 * 8);
    unsigned long long t0 = ~0ull, tend = 0;
    for (int b = 0; b < nblk; ++b) { t0 = std::min(t0, tr[b * 8]); tend = std::max(tend, tr[b * 8 + 4]); }
    // A CTA with no keys (more splits than tiles) leaves probes 2 and 3 unwritten: left out.
    std::vector<double> c[5];
    for (int b = 0; b < nblk; ++b) {
      if (tr[b * 8 + 2] < t0 || tr[b * 8 + 2] > tend || tr[b * 8 + 3] < t0 || tr[b * 8 + 3] > tend) continue;
      for (int i = 0; i < 5; ++i) c[i].push_back((tr[b * 8 + i] - t0) / 1e3);
    }
    printf("B%d L%d s%d %s: event %.1f us, first entry->last end %.1f us, %.2f TB/s\n", B, L, splits, page > 0 ? "paged" : "contiguous", ms * 1e3,
           (tend - t0) / 1e3, 2.0 * cache_elems * 2 / ((tend - t0) * 1e3));
    if (it < 4) continue;
    const char* nm[5] = {"entry", "after-wait", "tile0-landed", "loop-done", "end"};
    for (int i = 0; i < 5; ++i) print_spread(nm[i], c[i]);
    // per-CTA durations of the loop
    std::vector<double> dl, dt;
    for (size_t b = 0; b < c[0].size(); ++b) { dl.push_back(c[3][b] - c[2][b]); dt.push_back(c[4][b] - c[3][b]); }
    std::sort(dl.begin(), dl.end()); std::sort(dt.begin(), dt.end());
    printf("  loop dur      min %6.2f p50 %6.2f max %6.2f | epilogue p50 %6.2f max %6.2f\n", dl[0], dl[dl.size() / 2], dl.back(), dt[dt.size() / 2], dt.back());
  }
  cudaError_t err = cudaGetLastError(); printf("err %s\n", cudaGetErrorString(err));
}
