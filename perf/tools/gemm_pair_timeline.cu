// Per-CTA timeline of gemm_pair on the LLaMA-3-8B MLP (H 4096, I 14336, bf16): for the fused
// launch and the two-launch control, each CTA's entry, the end of its dependency wait, the end of
// its mainloop and its end (csrc/gemm_pair/trace.h), and its SM; printed as per-phase summaries
// next to a plain read of the same weight bytes, with every variant timed by events in
// interleaved rounds. Raw rows go to OUT_DIR/timeline_m<M>_<variant>.csv when OUT_DIR is set.
// Needs a GPU; not part of the extension:
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr --use_fast_math -DNDEBUG \
//        -gencode=arch=compute_90a,code=sm_90a -Icsrc -Ithird_party/cutlass/include \
//        perf/tools/gemm_pair_timeline.cu -o build/gemm_pair_timeline
//   [ARCH=sm80|sm90] [BLOCK_M=16|64|128|256] build/gemm_pair_timeline M [SPLIT_K0:SPLIT_K1 ...]
// ARCH=sm90 times the persistent SM90 kernel (block_m 64, 128 or 256), whose CTAs take several
// tickets each: its rows are per ticket, as the SM80 kernel's are per CTA.
// SPLIT_K0: K columns a GEMM0 split reads, SPLIT_K1: h columns a GEMM1 split reads; -1 picks as the
// op does (make_params, csrc/gemm_pair/params.h), 0 does not split. Default: -1:-1.
#define CUTE_OPS_GEMM_PAIR_TRACE
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gemm_pair/gemm_pair_launch.h"
#include "gemm_pair/gemm_pair_launch_sm90.h"
#include "gemm_pair/params.h"
#include "gemm_pair/tile_order.h"

using namespace cute_ops;
using Bf16 = cutlass::bfloat16_t;

__global__ void fill_kernel(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
    const float v = (float(x & 0xffff) / 65536.f - 0.5f) * 0.1f;
    p[i] = uint16_t(__float_as_uint(v) >> 16);
  }
}

__global__ void read_kernel(const int4* p, size_t n, int* out) {
  int acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    int4 a = p[i], b = p[i + stride], c = p[i + 2 * stride], d = p[i + 3 * stride];
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= p[i].x;
  if (acc == 0x12345678) out[0] = acc;
}

static float bf16_to_float(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

struct Variant {
  std::string name;
  gemm_pair::Policy policy;
  bool separate;
};

static double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * v.size()))];
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s M [SPLIT_K0:SPLIT_K1 ...]\n", argv[0]);
    return 2;
  }
  const int M = atoi(argv[1]), H = 4096, I = 14336, N0 = 2 * I;
  // The op's choice from M, or BLOCK_M from the environment (16, 64, 128 or 256 on sm90).
  const bool sm90 = getenv("ARCH") && std::string(getenv("ARCH")) == "sm90";
  const int block_m = getenv("BLOCK_M") ? atoi(getenv("BLOCK_M"))
                      : sm90            ? (M <= 64 ? 64 : M < 512 ? 128 : 256)
                                        : (M <= 16 ? 16 : M <= 64 ? 64 : 128);
  auto run = [&](const GemmPairParams& p, cudaStream_t st) {
    if (sm90) {
      if (block_m == 64) run_gemm_pair_sm90_<Bf16, 64>(p, st);
      else if (block_m == 128) run_gemm_pair_sm90_<Bf16, 128>(p, st);
      else run_gemm_pair_sm90_<Bf16, 256>(p, st);
    } else if (block_m == 16) run_gemm_pair_<Bf16, 16>(p, st);
    else if (block_m == 64) run_gemm_pair_<Bf16, 64>(p, st);
    else run_gemm_pair_<Bf16, 128>(p, st);
  };
  const int per_sm = sm90 ? (block_m == 64    ? gemm_pair_ctas_per_sm_sm90_<Bf16, 64>()
                             : block_m == 128 ? gemm_pair_ctas_per_sm_sm90_<Bf16, 128>()
                                              : gemm_pair_ctas_per_sm_sm90_<Bf16, 256>())
                     : block_m == 16 ? gemm_pair_ctas_per_sm_<Bf16, 16>()
                     : block_m == 64 ? gemm_pair_ctas_per_sm_<Bf16, 64>() : gemm_pair_ctas_per_sm_<Bf16, 128>();
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const int64_t slots = int64_t(prop.multiProcessorCount) * per_sm;

  uint16_t *a, *b0, *b1, *h, *out;
  int* sink;
  cudaMalloc(&a, size_t(M) * H * 2), cudaMalloc(&b0, size_t(N0) * H * 2), cudaMalloc(&b1, size_t(H) * I * 2);
  cudaMalloc(&h, size_t(M) * I * 2), cudaMalloc(&out, size_t(M) * H * 2), cudaMalloc(&sink, sizeof(int));
  fill_kernel<<<1024, 256>>>(a, size_t(M) * H, 1), fill_kernel<<<1024, 256>>>(b0, size_t(N0) * H, 2);
  fill_kernel<<<1024, 256>>>(b1, size_t(H) * I, 3);
  const double weight_bytes = 2.0 * (double(N0) * H + double(H) * I);

  // The op's launch (params.h): splits as asked, -1 picking as the op does, and the same
  // counters and workspace; each variant gets its own.
  gemm_pair::Problem problem;
  problem.m = M, problem.k = H, problem.n0 = N0, problem.n1 = H, problem.lda = H;
  problem.activation = gemm_pair::Activation::kSwiGLU, problem.tile_sync = true, problem.is_bf16 = true;
  problem.block_m = block_m, problem.slots = slots, problem.ctas_per_sm = per_sm;
  std::vector<std::pair<int64_t, int64_t>> split_list;
  for (int i = 2; i < argc; ++i) {
    int s0 = -1, s1 = -1;
    sscanf(argv[i], "%d:%d", &s0, &s1);
    split_list.push_back({s0, s1});
  }
  if (split_list.empty()) split_list.push_back({-1, -1});

  std::vector<Variant> variants;
  std::map<std::string, gemm_pair::Plan> plans;
  for (auto [s0, s1] : split_list) {
    problem.split_k0 = s0, problem.split_k1 = s1;
    gemm_pair::Plan plan = gemm_pair::make_params(problem);
    const std::string tag = "_" + std::to_string(plan.geometry.split_k0) + "_" + std::to_string(plan.geometry.split_k1);
    for (bool separate : {false, true}) {
      const Variant v{(separate ? "two_launches" : "fused") + tag, gemm_pair::Policy::kSequential, separate};
      const auto order = gemm_pair::build_order(plan.geometry, v.policy, problem.tile_sync, slots);
      int* t;
      cudaMalloc(&t, order.size() * 16);
      cudaMemcpy(t, order.data(), order.size() * 16, cudaMemcpyHostToDevice);
      int* counters;
      float* partials[2] = {nullptr, nullptr};
      cudaMalloc(&counters, plan.counters.size * sizeof(int));
      for (int i = 0; i < 2; ++i) {
        if (plan.partials[i]) cudaMalloc(&partials[i], plan.partials[i] * sizeof(float));
      }
      gemm_pair::bind_workspace(plan, counters, partials);
      plan.params.a = a, plan.params.b0 = b0, plan.params.b1 = b1, plan.params.h = h, plan.params.out = out;
      plan.params.order = reinterpret_cast<const int4*>(t);
      variants.push_back(v);
      plans[v.name] = plan;
    }
  }
  auto launch = [&](const Variant& v, cudaStream_t st) {
    const gemm_pair::Plan& plan = plans.at(v.name);
    cudaMemsetAsync(plan.params.ticket, 0, plan.counters.size * sizeof(int), st);
    if (!v.separate) return run(plan.params, st);
    for (const GemmPairParams& p : gemm_pair::two_launch_params(plan)) run(p, st);
  };

  cudaStream_t st;
  cudaStreamCreate(&st);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  printf("%s, %s, %d SMs, block_m %d, %d CTAs/SM, M=%d\n", prop.name, sm90 ? "sm90" : "sm80", prop.multiProcessorCount,
         block_m, per_sm, M);
  // Interleaved rounds: every variant (and the plain read) once per round, medians reported.
  std::map<std::string, std::vector<double>> times;
  for (int round = 0; round < 25; ++round) {
    for (const Variant& v : variants) {
      const int4* base = plans.at(v.name).params.order;
      cudaMemcpyToSymbolAsync(g_gemm_pair_trace_order, &base, sizeof(base), 0, cudaMemcpyHostToDevice, st);
      cudaEventRecord(e0, st);
      launch(v, st);
      cudaEventRecord(e1, st);
      cudaStreamSynchronize(st);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      if (round >= 3) times[v.name].push_back(ms * 1e3);
    }
    cudaEventRecord(e0, st);
    read_kernel<<<prop.multiProcessorCount * 8, 256, 0, st>>>((const int4*)b0, size_t(N0) * H * 2 / 16, sink);
    read_kernel<<<prop.multiProcessorCount * 8, 256, 0, st>>>((const int4*)b1, size_t(H) * I * 2 / 16, sink);
    cudaEventRecord(e1, st);
    cudaStreamSynchronize(st);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (round >= 3) times["read_weights"].push_back(ms * 1e3);
  }
  for (auto& [name, t] : times) {
    printf("  %-22s median %7.1f us  p10 %7.1f  p90 %7.1f  %.2f TB/s\n", name.c_str(), pct(t, 0.5), pct(t, 0.1),
           pct(t, 0.9), weight_bytes / (pct(t, 0.5) * 1e6));
  }

  const char* out_dir = getenv("OUT_DIR");
  for (const Variant& v : variants) {
    const gemm_pair::Plan& plan = plans.at(v.name);
    const GemmPairParams& p = plan.params;
    const int n = p.num_tiles, g0 = int(plan.tickets[0]);
    const int4* base = p.order;
    cudaMemcpyToSymbol(g_gemm_pair_trace_order, &base, sizeof(base));
    launch(v, st);  // warm
    cudaStreamSynchronize(st);
    void* trace = nullptr;  // cleared: probes a path does not reach stay 0
    cudaGetSymbolAddress(&trace, g_gemm_pair_trace);
    cudaMemset(trace, 0, size_t(n) * 8 * sizeof(unsigned long long));
    launch(v, st);
    cudaStreamSynchronize(st);
    // Agreement with the first variant's output (each should match it to bf16 rounding).
    static std::vector<uint16_t> first_out;
    std::vector<uint16_t> o(size_t(M) * H);
    cudaMemcpy(o.data(), out, o.size() * 2, cudaMemcpyDeviceToHost);
    if (first_out.empty()) first_out = o;
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      const float x = bf16_to_float(o[i]), y = bf16_to_float(first_out[i]);
      max_diff = std::max(max_diff, double(std::abs(x - y))), max_ref = std::max(max_ref, double(std::abs(y)));
    }
    unsigned long long bits = 1469598103934665603ull;  // FNV-1a of out's bits: equal across builds that agree bit for bit
    for (const uint16_t x : o) bits = (bits ^ x) * 1099511628211ull;
    printf("%s: max |out - first variant's| %.3g (max |out| %.3g, bits %016llx)\n", v.name.c_str(), max_diff, max_ref,
           bits);
    std::vector<unsigned long long> tr(size_t(n) * 8);
    cudaMemcpyFromSymbol(tr.data(), g_gemm_pair_trace, tr.size() * 8);
    std::vector<gemm_pair::Entry> order(n);
    cudaMemcpy(order.data(), base, n * 16, cudaMemcpyDeviceToHost);
    unsigned long long t0 = ~0ull;
    for (int i = 0; i < n; ++i) t0 = std::min(t0, tr[i * 8]);
    auto us = [&](int i, int k) { return (double)(tr[size_t(i) * 8 + k] - t0) / 1e3; };
    std::vector<double> c[2][4];
    std::vector<int> per_sm_g0(prop.multiProcessorCount), per_sm_all(prop.multiProcessorCount);
    double g0_end = 0, g1_end = 0;
    for (int i = 0; i < n; ++i) {
      const int gemm = order[i][0];
      for (int k = 0; k < 4; ++k) c[gemm][k].push_back(us(i, k));
      if (gemm == 0) per_sm_g0[tr[i * 8 + 7]]++, g0_end = std::max(g0_end, us(i, 3));
      else g1_end = std::max(g1_end, us(i, 3));
      per_sm_all[tr[i * 8 + 7]]++;
    }
    printf("%s: %d GEMM0 + %d GEMM1 CTAs (splits %d + %d): GEMM0 done at %.1f us (%.2f TB/s), all done at %.1f us "
           "(GEMM1 phase %.1f us, %.2f TB/s)\n",
           v.name.c_str(), g0, n - g0, p.splits0, p.splits1, g0_end, 2.0 * N0 * H / (g0_end * 1e6), g1_end, g1_end - g0_end,
           2.0 * H * I / ((g1_end - g0_end) * 1e6));
    const char* probe[4] = {"entry", "past wait", "loop done", "end"};
    for (int gemm = 0; gemm < 2; ++gemm)
      for (int k = 0; k < 4; ++k)
        printf("  GEMM%d %-10s min %7.1f p10 %7.1f p50 %7.1f p90 %7.1f max %7.1f\n", gemm, probe[k],
               pct(c[gemm][k], 0), pct(c[gemm][k], 0.1), pct(c[gemm][k], 0.5), pct(c[gemm][k], 0.9),
               pct(c[gemm][k], 1.0));
    std::vector<double> d0;
    for (int i = 0; i < g0; ++i) d0.push_back(us(i, 2) - us(i, 1));
    printf("  GEMM0 loop duration min %.1f p50 %.1f max %.1f\n", pct(d0, 0), pct(d0, 0.5), pct(d0, 1.0));
    // Each GEMM's k-loop rate (us per 64-column k-step) by phase of the launch: GEMM0's tiles whose
    // loop ended before any GEMM1 tile got past its wait ("alone") or after ("beside GEMM1"); GEMM1's
    // tiles past their wait before GEMM0's last tile ended ("beside GEMM0") or after ("after GEMM0").
    {
      const gemm_pair::Geometry& geo = plan.geometry;
      auto k_steps = [&](int i) {
        const bool first = order[i][0] == 0;
        const int64_t cols = first ? geo.k0_cols() : geo.k1_cols(), total = first ? geo.k : geo.h_width();
        return double((std::min(cols, total - order[i][3] * cols) + 63) / 64);
      };
      double g1_start = 1e30;
      for (int i = 0; i < n; ++i)
        if (order[i][0] == 1) g1_start = std::min(g1_start, us(i, 1));
      std::vector<double> rate[2][2];  // [gemm][phase]
      for (int i = 0; i < n; ++i) {
        const int gemm = order[i][0];
        const bool late = gemm == 0 ? us(i, 2) > g1_start : us(i, 1) >= g0_end;
        rate[gemm][late].push_back((us(i, 2) - us(i, 1)) / k_steps(i));
      }
      const char* phase[2][2] = {{"alone", "beside GEMM1"}, {"beside GEMM0", "after GEMM0"}};
      printf("  k-step (us) by phase:");
      for (int gemm = 0; gemm < 2; ++gemm)
        for (int late = 0; late < 2; ++late)
          if (!rate[gemm][late].empty())
            printf("  GEMM%d %s p50 %.3f (n %zu)", gemm, phase[gemm][late], pct(rate[gemm][late], 0.5),
                   rate[gemm][late].size());
      printf("\n");
    }
    std::map<int, int> hist;
    for (int x : per_sm_g0) hist[x]++;
    printf("  SMs by GEMM0 CTAs:");
    for (auto [k, cnt] : hist) printf(" %d->%d", k, cnt);
    // GEMM0 CTAs whose SM hosts k of them: their loop duration.
    std::map<int, std::vector<double>> by_load;
    for (int i = 0; i < g0; ++i) by_load[per_sm_g0[tr[i * 8 + 7]]].push_back(us(i, 2) - us(i, 1));
    printf("\n  GEMM0 loop p50 by SM load:");
    for (auto& [k, v2] : by_load) printf(" %d: %.1f us (n %zu)", k, pct(v2, 0.5), v2.size());
    printf("\n");
    if (out_dir) {
      const std::string path = std::string(out_dir) + "/timeline_m" + std::to_string(M) + "_" + v.name + ".csv";
      FILE* f = fopen(path.c_str(), "w");
      // staged_us / summed_us: SM90 only (trace.h's probes 4 and 5; summed only where a GEMM1 split summed).
      fprintf(f, "ticket,gemm,m_block,n_tile,split,sm,entry_us,past_wait_us,loop_done_us,end_us,staged_us,summed_us\n");
      for (int i = 0; i < n; ++i)
        fprintf(f, "%d,%d,%d,%d,%d,%llu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", i, order[i][0], order[i][1], order[i][2],
                order[i][3], tr[i * 8 + 7], us(i, 0), us(i, 1), us(i, 2), us(i, 3), tr[i * 8 + 4] ? us(i, 4) : -1.0,
                tr[i * 8 + 5] ? us(i, 5) : -1.0);
      fclose(f);
    }
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
