// Does compute-sanitizer's racecheck model a split named barrier (bar.arrive by producers,
// bar.sync by a consumer)? gemv's async reduce (CUTE_OPS_GEMV_ASYNC_REDUCE) hands a unit's
// partial sums to one warp that way, and racecheck reported hazards on exactly those accesses
// (session 46). This kernel does the same hand-over, correct by the PTX memory model, in three
// ways: `arrive` (producers bar.arrive, the consumer bar.sync, as gemv), `sync` (everyone
// bar.sync on the named barrier) and `none` (no barrier: a real race, the control that racecheck
// must flag). Build and run on a GPU:
//   nvcc -std=c++17 -arch=sm_90a -I third_party/cutlass/include perf/tools/racecheck_arrive.cu -o /tmp/rc
//   for m in arrive sync none; do compute-sanitizer --tool racecheck /tmp/rc $m; done
#include <cstdio>
#include <cstring>

#include <cutlass/arch/barrier.h>

constexpr int kWarps = 8, kThreads = kWarps * 32;

template <int kMode>  // 0: arrive / sync, 1: all sync, 2: no barrier
__global__ void hand_over(float* out) {
  __shared__ float s[kWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int unit = 0; unit < 4; ++unit) {
    const int buffer_owner = unit % kWarps;  // the unit's reducer
    s[warp][lane] = static_cast<float>(unit * kThreads + threadIdx.x);
    asm volatile("" ::: "memory");
    if (kMode == 0) {
      if (warp != buffer_owner) cutlass::arch::NamedBarrier::arrive(kThreads, 1);
      else cutlass::arch::NamedBarrier::sync(kThreads, 1);
    } else if (kMode == 1) {
      cutlass::arch::NamedBarrier::sync(kThreads, 1);
    }
    asm volatile("" ::: "memory");
    if (warp == buffer_owner) {
      float v = 0.f;
      for (int w = 0; w < kWarps; ++w) v += s[w][lane];
      out[unit * 32 + lane] = v;
    }
    // every warp waits here before the next unit's writes (only the hand-over above is tested)
    __syncthreads();
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "arrive";
  float* out;
  cudaMalloc(&out, 4 * 32 * sizeof(float));
  if (!strcmp(mode, "arrive")) hand_over<0><<<1, kThreads>>>(out);
  else if (!strcmp(mode, "sync")) hand_over<1><<<1, kThreads>>>(out);
  else hand_over<2><<<1, kThreads>>>(out);
  const cudaError_t err = cudaDeviceSynchronize();
  float host[4 * 32];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  float want = 0.f;  // unit 0, lane 0: sum over warps of w * 32
  for (int w = 0; w < kWarps; ++w) want += static_cast<float>(w * 32);
  printf("%s: %s, out[0] = %g (want %g)\n", mode, cudaGetErrorString(err), host[0], want);
  return err != cudaSuccess;
}
