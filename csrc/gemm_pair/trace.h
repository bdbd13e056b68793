#pragma once
// Timeline probes for gemm_pair, compiled out unless CUTE_OPS_GEMM_PAIR_TRACE is defined (a
// profiling build: perf/tools/gemm_pair_timeline.cu, never the extension). Thread 0 of each CTA
// stores the global timer at probe i to g_gemm_pair_trace[slot * 8 + i], where slot is the CTA's
// entry in the order table counted from g_gemm_pair_trace_order (so the two-launch control's
// second launch lands after the first), and its SM id to entry 7.
//   0 entry (before the ticket)  1 past the dependency wait  2 mainloop done  3 end
// The persistent SM90 kernel's producer and consumers work on different tiles at once, so its
// probes name the tile's slot themselves (its ticket's row, GEMM_PAIR_TRACE_SLOT):
// GEMM_PAIR_TRACE_TICKET(ticket, t_entry) from the producer, GEMM_PAIR_TRACE_AT(ticket, i) from
// one thread of either role; it adds
//   4 accumulators staged  5 split-K sum done (the last split of a GEMM1 tile only)
#ifdef CUTE_OPS_GEMM_PAIR_TRACE
__device__ unsigned long long g_gemm_pair_trace[1 << 20];
__device__ const int4* g_gemm_pair_trace_order;

namespace cute_ops::gemm_pair::trace {
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned& slot() {
  __shared__ unsigned s;
  return s;
}
// Thread 0, once it holds its ticket's entry.
__device__ __forceinline__ void begin(const int4* entry, unsigned long long t_entry) {
  const long long s = entry - g_gemm_pair_trace_order;
  slot() = s >= 0 && s < (1 << 17) ? static_cast<unsigned>(s) : (1u << 17) - 1;  // stray base: one junk row
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  g_gemm_pair_trace[slot() * 8 + 0] = t_entry;
  g_gemm_pair_trace[slot() * 8 + 7] = sm;
}
__device__ __forceinline__ void at(int i) {
  if (threadIdx.x == 0) g_gemm_pair_trace[slot() * 8 + i] = now();
}
__device__ __forceinline__ unsigned slot_of(int ticket) {
  return ticket >= 0 && ticket < (1 << 17) ? static_cast<unsigned>(ticket) : (1u << 17) - 1;
}
__device__ __forceinline__ void ticket(int ticket, unsigned long long t_entry) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  g_gemm_pair_trace[slot_of(ticket) * 8 + 0] = t_entry;
  g_gemm_pair_trace[slot_of(ticket) * 8 + 7] = sm;
}
__device__ __forceinline__ void at_ticket(int ticket, int i) { g_gemm_pair_trace[slot_of(ticket) * 8 + i] = now(); }
// The row of a launch's ticket: counted from g_gemm_pair_trace_order, so that the two-launch
// control's second launch (its order table starts after the first's, its tickets from 0) lands
// after the first, as the SM80 kernel's begin() does.
__device__ __forceinline__ int ticket_row(const int4* order, int ticket) {
  return static_cast<int>(order - g_gemm_pair_trace_order) + ticket;
}
}  // namespace cute_ops::gemm_pair::trace
#define GEMM_PAIR_TRACE_NOW() cute_ops::gemm_pair::trace::now()
#define GEMM_PAIR_TRACE_TICKET(ticket, t) cute_ops::gemm_pair::trace::ticket(ticket, t)
#define GEMM_PAIR_TRACE_AT(ticket, i) cute_ops::gemm_pair::trace::at_ticket(ticket, i)
#define GEMM_PAIR_TRACE_SLOT(order, ticket) cute_ops::gemm_pair::trace::ticket_row(order, ticket)
#define GEMM_PAIR_TRACE_BEGIN(entry, t) cute_ops::gemm_pair::trace::begin(entry, t)
#define GEMM_PAIR_TRACE(i) cute_ops::gemm_pair::trace::at(i)
#else
#define GEMM_PAIR_TRACE_NOW() 0ull
#define GEMM_PAIR_TRACE_BEGIN(entry, t) ((void)(t))
#define GEMM_PAIR_TRACE(i) ((void)0)
#define GEMM_PAIR_TRACE_TICKET(ticket, t) ((void)(ticket), (void)(t))
#define GEMM_PAIR_TRACE_AT(ticket, i) ((void)(ticket))
#define GEMM_PAIR_TRACE_SLOT(order, ticket) (ticket)
#endif
