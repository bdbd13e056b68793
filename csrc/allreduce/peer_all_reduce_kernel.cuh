#pragma once
// The kernel of peer_all_reduce (peer_all_reduce.h says what it does and why it is safe).
// Names: a line is 8 bytes of x as two words w = (data << 0) | (epoch << 32), one a thread
// (common/peer_lines.cuh); `mine` is this rank's line, held in registers from the load to the sum.
#include <cstdint>
#include <cstdio>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "allreduce/peer_all_reduce.h"
#include "common/pdl.h"
#include "common/peer_lines.cuh"
#include "common/peer_wait.h"

namespace cute_ops::allreduce {

// The 8 bytes of x in a line as floats (4 16-bit values or 2 float32).
template <typename T>
struct Lane {
  __device__ static void add(float (&acc)[4], uint32_t lo, uint32_t hi) {
    const uint32_t w[2] = {lo, hi};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (sizeof(T) == 4) {
        acc[i] += __uint_as_float(w[i]);
      } else {
        const T* v = reinterpret_cast<const T*>(&w[i]);
        acc[2 * i] += static_cast<float>(v[0]);
        acc[2 * i + 1] += static_cast<float>(v[1]);
      }
    }
  }
  __device__ static uint2 pack(const float (&acc)[4]) {
    uint2 out;
    uint32_t* w = &out.x;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (sizeof(T) == 4) {
        w[i] = __float_as_uint(acc[i]);
      } else {
        T v[2] = {static_cast<T>(acc[2 * i]), static_cast<T>(acc[2 * i + 1])};
        w[i] = *reinterpret_cast<const uint32_t*>(v);
      }
    }
    return out;
  }
};

// kCollect (a call with `pushed`): the ranks' gemvs stored this call's lines into every rank's
// inboxes themselves (gemv/gemv_exchange.h, kPushLines), this rank's own included; the kernel only
// sums them. It needs nothing of the previous kernel to read them (each word says whether it has
// landed), so it waits for that kernel only before it stores x: x is the gemv's output (and its
// memory may be what an earlier kernel still reads).
template <typename T, int kWorld, bool kCollect>
__global__ void __launch_bounds__(kPeerThreads) peer_all_reduce_kernel(const PeerAllReduceParams p) {
  // The next kernel (a gemv) may launch now and start its weight copies; it waits for this
  // kernel's end before it reads x.
  allow_dependent_launch();
  if constexpr (!kCollect) wait_for_previous_grid();  // x comes from the previous kernel

  const PeerLayout layout{kWorld};
  void* own = p.workspaces[p.rank];
  uint32_t* uses = peer_uses(own, layout, blockIdx.x);
  const int64_t line = static_cast<int64_t>(blockIdx.x) * kPeerLinesPerBlock + threadIdx.x;
  const bool active = line < p.lines;
  uint2* x = static_cast<uint2*>(p.x);
  // In flight with the count's load. (Collect: the count was last written by this CTA's previous
  // call, which ended before the gemv that launched this kernel passed its own wait.)
  const uint2 mine = !kCollect && active ? x[line] : make_uint2(0, 0);
  __shared__ uint32_t call;
  if (threadIdx.x == 0) call = *reinterpret_cast<volatile uint32_t*>(uses);
  __syncthreads();
  const uint32_t epoch = call + 1, parity = call & 1;

  if (active) {
    if constexpr (!kCollect) {
      // Into every peer's inbox of this rank (over NVLink), all stores before any wait.
#pragma unroll
      for (int step = 1; step < kWorld; ++step) {
        const int peer = (p.rank + step) % kWorld;
        store_peer_line(peer_line_at(p.workspaces[peer], layout, parity, p.rank, line), mine.x, mine.y, epoch);
      }
    }
    // Every rank's values in rank order, from this rank's inboxes once their epochs are the call's.
    const uint64_t start = global_ns();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int r = 0; r < kWorld; ++r) {
      uint32_t lo = mine.x, hi = mine.y;
      if (kCollect || r != p.rank) {
        const char* at = peer_line_at(own, layout, parity, r, line);
        uint64_t a, b;
        for (int spins = 1;; ++spins) {
          load_peer_line(at, a, b);
          if (static_cast<uint32_t>(a >> 32) == epoch && static_cast<uint32_t>(b >> 32) == epoch) break;
          if (spins % 1024 == 0 && global_ns() - start > kPeerWaitTimeoutNs) {
            printf("cute_ops peer_all_reduce: rank %d waited %llu s for rank %d's call %u; trapping\n", p.rank,
                   static_cast<unsigned long long>(kPeerWaitTimeoutNs / 1000000000ull), r, epoch);
            __trap();
          }
        }
        lo = static_cast<uint32_t>(a), hi = static_cast<uint32_t>(b);
      }
      Lane<T>::add(acc, lo, hi);
    }
    if constexpr (kCollect) wait_for_previous_grid();
    x[line] = Lane<T>::pack(acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) *uses = epoch;  // this CTA's calls, read by its next call
}

}  // namespace cute_ops::allreduce
