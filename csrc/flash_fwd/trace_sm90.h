#pragma once
// Timeline probes for the SM90 forward kernel, compiled out unless CUTE_OPS_FLASH_FWD_TRACE is
// defined (a profiling build, never the extension: perf/tools/flash_fwd_timeline.cu). Thread 0 of
// each consumer warp group stores the global timer at probe i (< 4) of the n-th Q slot its CTA
// reads (n < kFwdTraceTiles; later ones are not traced) to
// g_fwd_trace[((blockIdx.x * kFwdTraceTiles + n) * kFwdTraceGroups + group) * 4 + i].
#ifdef CUTE_OPS_FLASH_FWD_TRACE
namespace cute_ops::flash {
constexpr int kFwdTraceTiles = 64;
constexpr int kFwdTraceCtas = 4096;  // CTAs traced (blockIdx.x below this)
constexpr int kFwdTraceGroups = 3;   // consumer warp groups a CTA may have (head dim 64's 192 rows: 3)
}  // namespace cute_ops::flash
__device__ unsigned long long g_fwd_trace[cute_ops::flash::kFwdTraceCtas * cute_ops::flash::kFwdTraceTiles *
                                       cute_ops::flash::kFwdTraceGroups * 4];
#define FWD_TRACE(n, thread, i)                                                                               \
  do {                                                                                                        \
    if ((thread) % 128 == 0 && (n) < kFwdTraceTiles && blockIdx.x < kFwdTraceCtas) {                          \
      unsigned long long t;                                                                                   \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));                                                   \
      g_fwd_trace[((static_cast<size_t>(blockIdx.x) * kFwdTraceTiles + (n)) * kFwdTraceGroups + (thread) / 128) * 4 + \
                  (i)] = t;                                                                                    \
    }                                                                                                         \
  } while (0)
#else
#define FWD_TRACE(n, thread, i) ((void)0)
#endif
