#pragma once
// Inter-CTA signals of gemm_pair (docs/gemm_pair.md, "Dependencies and their signals"). A
// producer's stores are published by a barrier, then one thread's release increment: the release
// is cumulative, so it orders every store the barrier made visible to that thread. A consumer's
// one thread spins with acquire loads, then a barrier extends the order to the other threads.
// Consumers read the published data with L1-bypassing loads (cp.async.cg, ld.global.cg).
//
// The barrier is the caller's: every function here that needs one takes it as an argument, a
// type with sync() (the barrier over the threads that stored or will load the data) and
// is_leader() (the one of them that signals or polls). The SM80 kernel passes CtaBarrier, the
// whole CTA; a warp-specialised kernel passes a named barrier over its consumer warps, so that its
// producer warp never has to take part.

namespace cute_ops::gemm_pair {

struct CtaBarrier {
  __device__ static void sync() { __syncthreads(); }
  __device__ static bool is_leader() { return threadIdx.x == 0; }
};

// Hardware barrier kId (1..15; 0 is __syncthreads') over the kThreads threads from threadIdx.x
// kFirstThread: the consumer warp groups of the SM90 kernel, without its producer warp group.
template <int kId, int kThreads, int kFirstThread>
struct NamedBarrier {
  static_assert(kId > 0 && kId < 16 && kThreads % 32 == 0);
  __device__ static void sync() { asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory"); }
  __device__ static bool is_leader() { return threadIdx.x == kFirstThread; }
};

// One thread alone (the SM90 producer's elected thread waits for h by itself).
struct ThisThread {
  __device__ static void sync() {}
  __device__ static bool is_leader() { return true; }
};

// Orders this thread's generic-proxy accesses to global memory (ordinary loads and stores, and
// what an acquire made visible) with its later async-proxy ones (TMA), and, on the producer side,
// its stores with the release that follows. h is written by st.global and read by TMA in the same
// launch: the writers fence before they signal, the reader after its acquire and before its TMA
// loads (docs/gemm_pair.md, "h through TMA").
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_release(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int fetch_add_acq_rel(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

__device__ __forceinline__ int load_relaxed(const int* p) {
  int v;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Called by every thread of `barrier` after its last store of the data being published; adds
// `count` to the counter.
template <typename Barrier>
__device__ __forceinline__ void signal(int* counter, Barrier barrier, int count = 1) {
  barrier.sync();
  if (barrier.is_leader()) add_release(counter, count);
}

// Called by every thread of `barrier`: returns once `*counter >= target`, with the producers'
// stores visible. At decode sizes a few hundred consumer CTAs wait at once, while the producers
// stream weights: they poll with relaxed loads and a backoff up to ~1 us (keeping the counters'
// L2 slices quiet), and one acquire load, once the target is reached, orders what follows.
template <typename Barrier>
__device__ __forceinline__ void wait_until(const int* counter, int target, Barrier barrier) {
  if (barrier.is_leader()) {
    unsigned sleep_ns = 64;
    while (load_relaxed(counter) < target) {
      __nanosleep(sleep_ns);
      sleep_ns = min(sleep_ns * 2, 1024u);
    }
    (void)load_acquire(counter);
  }
  barrier.sync();
}

// wait_until for a short wait on few waiters (gemm_pair's folded K-splits, where the counter is
// usually reached already): each poll is the acquire load, so a reached counter costs one round
// trip, and the backoff stops at 256 ns.
template <typename Barrier>
__device__ __forceinline__ void wait_at_least(const int* counter, int target, Barrier barrier) {
  if (barrier.is_leader()) {
    unsigned sleep_ns = 32;
    while (load_acquire(counter) < target) {
      __nanosleep(sleep_ns);
      sleep_ns = min(sleep_ns * 2, 256u);
    }
  }
  barrier.sync();
}

// The counters are not zeroed before a launch (common/arrival_counters.h): each launch leaves
// them at zero. The launch's last CTA to finish resets them all here (the ticket, its count of
// finished CTAs, and the `count` counters from `rest` on: ready flags and split arrivals). Its
// acquire-release count on `exited` orders every other CTA's last access of them before its
// stores. Every thread of the CTA calls it once, after all its work.
__device__ __forceinline__ void retire(int* ticket, int* exited, int* rest, int count) {
  __shared__ bool is_last;
  __syncthreads();
  if (threadIdx.x == 0) is_last = fetch_add_acq_rel(exited, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!is_last) return;
  for (int i = threadIdx.x; i < count; i += blockDim.x) rest[i] = 0;
  if (threadIdx.x == 0) *ticket = 0, *exited = 0;
}

}  // namespace cute_ops::gemm_pair
