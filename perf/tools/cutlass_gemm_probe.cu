// What CUTLASS's own sm90 GEMM kernels reach on the LLaMA-3-8B MLP's two GEMM shapes, per tile
// shape, cluster shape, kernel schedule and tile-scheduler raster, next to cuBLAS in the same
// process: the ceiling that gemm_pair's sm90 mainloop (256 x 128 tiles, cooperative, no cluster)
// is measured against at M >= 512, where issue 17 trails torch.compile's cuBLAS matmuls by 2-3%.
// A probe, not a kernel of the library: D = A B^T with A [M, K] and B [N, K] bf16 (nn.Linear's
// layout), D bf16, fp32 accumulators. An H200 under this load runs at its power cap, where the SM
// clock moves by up to 18% (docs/perf-notes.md, sessions 46 and 59), so the configs run in rounds,
// forward then backward (A B C .. C B A ..), each a timing of 20 back-to-back launches, and the
// table gives each config's median, min and max over the rounds. Every config's D is compared with
// the first config's (the same products summed in the same K order: 0 expected).
// cuBLAS (cublasGemmEx, default algorithm) is loaded at run time from CUBLAS_LIB (a path to
// libcublas.so.*; e.g. the one PyTorch ships), so the probe builds where cuBLAS is absent.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
//        -Ithird_party/cutlass/include perf/tools/cutlass_gemm_probe.cu -o build/cutlass_gemm_probe -ldl
//   CUBLAS_LIB=/path/to/libcublas.so.13 build/cutlass_gemm_probe [ROUNDS]
#include <dlfcn.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

using namespace cute;
using Bf16 = cutlass::bfloat16_t;

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// One CUTLASS GEMM: the mainloop and epilogue as CollectiveBuilder picks them for the schedule,
// the ring as deep as the shared memory left by the epilogue's allows.
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule>
struct Config {
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8, Bf16,
      cutlass::layout::RowMajor, 8, EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::RowMajor, 8, Bf16,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingEpi = cutlass::epilogue::TmaWarpSpecialized;
using Raster = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params::RasterOrderOptions;

struct Problem {
  int m, n, k;
  const Bf16 *a, *b;
  Bf16* d;
};

__global__ void fill(Bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = Bf16((float(h & 0xffff) / 65536.f - 0.5f) * 0.125f);
  }
}

__global__ void max_diff(const Bf16* x, const Bf16* y, size_t n, float* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(float(x[i]) - float(y[i])));
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // non-negative floats order as ints
}

// One config bound to a problem: initialised once, then launched by run().
struct Runner {
  std::string name;
  std::function<void()> launch;
};

template <class C>
bool make_runner(const char* name, const Problem& pr, Raster raster, int swizzle, int sms, std::vector<Runner>& out) {
  using Gemm = typename C::Gemm;
  using Kernel = typename C::Kernel;
  typename Kernel::StrideA sa{int64_t(pr.k), _1{}, int64_t(0)};
  typename Kernel::StrideB sb{int64_t(pr.k), _1{}, int64_t(0)};
  typename Kernel::StrideC sc{int64_t(pr.n), _1{}, int64_t(0)};
  typename Kernel::StrideD sd{int64_t(pr.n), _1{}, int64_t(0)};
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sms;
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {pr.m, pr.n, pr.k, 1},
                                {pr.a, sa, pr.b, sb},
                                {{1.f, 0.f}, nullptr, sc, pr.d, sd},
                                hw};
  args.scheduler.raster_order = raster;
  args.scheduler.max_swizzle_size = swizzle;
  auto gemm = std::make_shared<Gemm>();
  if (gemm->can_implement(args) != cutlass::Status::kSuccess) {
    std::printf("%s: cannot implement\n", name);
    return false;
  }
  void* workspace = nullptr;
  const size_t ws = Gemm::get_workspace_size(args);
  if (ws) CHECK(cudaMalloc(&workspace, ws));  // kept for the process's life
  if (gemm->initialize(args, workspace) != cutlass::Status::kSuccess) {
    std::printf("%s: cannot initialise\n", name);
    return false;
  }
  out.push_back({name, [gemm] { gemm->run(); }});
  return true;
}

// cublasGemmEx through dlopen: its prototype and the enum values it takes (cublas_api.h's).
using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                       const void*, void*, int, int, int, int);
constexpr int kOpN = 0, kOpT = 1, kBf16 = 14 /* CUDA_R_16BF */, kCompute32F = 68, kAlgoDefault = -1;

bool make_cublas_runner(const Problem& pr, std::vector<Runner>& out) {
  const char* lib = std::getenv("CUBLAS_LIB");
  if (!lib) return false;
  void* h = dlopen(lib, RTLD_NOW);
  if (!h) {
    std::printf("cuBLAS: %s\n", dlerror());
    return false;
  }
  static void* handle = nullptr;
  if (!handle) {
    auto create = reinterpret_cast<int (*)(void**)>(dlsym(h, "cublasCreate_v2"));
    if (!create || create(&handle) != 0) return false;
  }
  auto gemm_ex = reinterpret_cast<GemmEx>(dlsym(h, "cublasGemmEx"));
  if (!gemm_ex) return false;
  static const float alpha = 1.f, beta = 0.f;
  // Column-major view: D^T [N, M] = B [N, K] (K-major, so op T of a K x N matrix) x A^T.
  out.push_back({"cuBLAS cublasGemmEx", [=] {
                   gemm_ex(handle, kOpT, kOpN, pr.n, pr.m, pr.k, &alpha, pr.b, kBf16, pr.k, pr.a, kBf16, pr.k, &beta,
                           pr.d, kBf16, pr.n, kCompute32F, kAlgoDefault);
                 }});
  return true;
}

float time_runner(const Runner& r) {
  for (int i = 0; i < 2; ++i) r.launch();
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventRecord(e0));
  for (int i = 0; i < 20; ++i) r.launch();
  CHECK(cudaEventRecord(e1));
  CHECK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaGetLastError());
  return ms * 1000.f / 20;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 6;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int shapes[][3] = {{8192, 28672, 4096}, {8192, 4096, 14336}, {2048, 28672, 4096},
                           {2048, 4096, 14336}, {512, 28672, 4096},  {512, 4096, 14336}};
  size_t max_a = 0, max_b = 0, max_d = 0;
  for (auto& s : shapes) {
    max_a = std::max(max_a, size_t(s[0]) * s[2]);
    max_b = std::max(max_b, size_t(s[1]) * s[2]);
    max_d = std::max(max_d, size_t(s[0]) * s[1]);
  }
  Bf16 *a, *b, *d, *ref;
  float* diff;
  CHECK(cudaMalloc(&a, max_a * sizeof(Bf16)));
  CHECK(cudaMalloc(&b, max_b * sizeof(Bf16)));
  CHECK(cudaMalloc(&d, max_d * sizeof(Bf16)));
  CHECK(cudaMalloc(&ref, max_d * sizeof(Bf16)));
  CHECK(cudaMalloc(&diff, sizeof(float)));
  fill<<<1024, 256>>>(a, max_a, 1u);
  fill<<<1024, 256>>>(b, max_b, 2u);
  for (auto& s : shapes) {
    const Problem pr{s[0], s[1], s[2], a, b, d};
    const size_t d_elems = size_t(pr.m) * pr.n;
    std::vector<Runner> runners;
    using T256x128 = Shape<_256, _128, _64>;
    using T128x256 = Shape<_128, _256, _64>;
    using T128x128 = Shape<_128, _128, _64>;
    make_runner<Config<T256x128, Shape<_1, _1, _1>, Coop, CoopEpi>>("256x128 coop 1x1 along_m/8 (gemm_pair's)", pr,
                                                                    Raster::AlongM, 8, sms, runners);
    make_runner<Config<T256x128, Shape<_1, _2, _1>, Coop, CoopEpi>>("256x128 coop 1x2 heuristic/1", pr,
                                                                    Raster::Heuristic, 1, sms, runners);
    make_runner<Config<T256x128, Shape<_1, _2, _1>, Coop, CoopEpi>>("256x128 coop 1x2 along_m/8", pr, Raster::AlongM,
                                                                    8, sms, runners);
    make_runner<Config<T256x128, Shape<_2, _1, _1>, Coop, CoopEpi>>("256x128 coop 2x1 heuristic/1", pr,
                                                                    Raster::Heuristic, 1, sms, runners);
    make_runner<Config<T128x256, Shape<_1, _1, _1>, Coop, CoopEpi>>("128x256 coop 1x1 along_n/8", pr, Raster::AlongN,
                                                                    8, sms, runners);
    make_runner<Config<T128x256, Shape<_2, _1, _1>, Coop, CoopEpi>>("128x256 coop 2x1 heuristic/1", pr,
                                                                    Raster::Heuristic, 1, sms, runners);
    make_runner<Config<T128x128, Shape<_1, _1, _1>, Coop, CoopEpi>>("128x128 coop 1x1 along_m/8", pr,
                                                                    Raster::AlongM, 8, sms, runners);
    make_runner<Config<T128x128, Shape<_1, _1, _1>, Ping, PingEpi>>("128x128 pingpong 1x1 heuristic/1", pr,
                                                                    Raster::Heuristic, 1, sms, runners);
    make_cublas_runner(pr, runners);
    // Correctness: every runner's D against the first's, each from a poisoned D.
    std::vector<float> diffs;
    for (size_t i = 0; i < runners.size(); ++i) {
      CHECK(cudaMemset(d, 0xff, d_elems * sizeof(Bf16)));  // NaN in bf16
      runners[i].launch();
      if (i == 0) {
        CHECK(cudaMemcpy(ref, d, d_elems * sizeof(Bf16), cudaMemcpyDeviceToDevice));
        diffs.push_back(0.f);
        continue;
      }
      CHECK(cudaMemset(diff, 0, sizeof(float)));
      max_diff<<<1024, 256>>>(d, ref, d_elems, diff);
      float h = 0.f;
      CHECK(cudaMemcpy(&h, diff, sizeof(float), cudaMemcpyDeviceToHost));
      diffs.push_back(h);
    }
    std::vector<std::vector<float>> us(runners.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t j = 0; j < runners.size(); ++j) {
        const size_t i = r % 2 ? runners.size() - 1 - j : j;
        us[i].push_back(time_runner(runners[i]));
      }
    }
    std::printf("M=%d N=%d K=%d, %d rounds (us a launch; TFLOP/s at the median)\n", pr.m, pr.n, pr.k, rounds);
    for (size_t i = 0; i < runners.size(); ++i) {
      std::vector<float> v = us[i];
      std::sort(v.begin(), v.end());
      const float med = v[v.size() / 2];
      std::printf("  %-44s median %8.1f  min %8.1f  max %8.1f  %6.1f TFLOP/s  max|D-D0| %.3g\n",
                  runners[i].name.c_str(), med, v.front(), v.back(), 2.0 * pr.m * pr.n * pr.k / (med * 1e6),
                  diffs[i]);
    }
    std::fflush(stdout);
  }
  return 0;
}
