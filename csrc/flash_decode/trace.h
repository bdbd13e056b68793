#pragma once
// Timeline probes for the decode kernel, compiled out unless CUTE_OPS_DECODE_TRACE is defined
// (a profiling build, never the extension): thread 0 of each CTA stores the global timer at probe
// i to g_decode_trace[slot * 8 + i] (slot = linear CTA index, after those of the runs before) and
// its SM id to entry 7.
#ifdef CUTE_OPS_DECODE_TRACE
__device__ unsigned long long g_decode_trace[1 << 23];
// A tool tracing several launches at once (a CUDA graph of them) defines this to the launch's
// run number, from the kernel's params `p`; each run then has its own slots after the ones before.
#ifndef CUTE_OPS_DECODE_TRACE_RUN
#define CUTE_OPS_DECODE_TRACE_RUN(p) 0
#endif
#define DECODE_TRACE(i)                                                                            \
  do {                                                                                             \
    if (threadIdx.x == 0) {                                                                        \
      unsigned long long t;                                                                        \
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));                                        \
      const unsigned ctas = gridDim.x * gridDim.y * gridDim.z;                                     \
      const unsigned slot = CUTE_OPS_DECODE_TRACE_RUN(p) * ctas + blockIdx.x +                     \
                            gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);                     \
      g_decode_trace[slot * 8 + (i)] = t;                                                          \
      unsigned sm;                                                                                 \
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));                                              \
      g_decode_trace[slot * 8 + 7] = sm;                                                           \
    }                                                                                              \
  } while (0)
#else
#define DECODE_TRACE(i) ((void)0)
#endif
