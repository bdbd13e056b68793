#pragma once
// Zeroed int32 counters for kernels whose CTAs count their arrivals (the last CTA to arrive at a
// piece of work finishes it: no second launch, no per-call memset).
//
// The contract: a kernel takes counters from arrival_counters() for the stream it is launched on,
// and leaves every counter it touched at zero when it finishes (the last arriver resets it), so
// the next kernel on that stream finds them zero again. Counters are not shared between work that
// may run at the same time:
//  - eager calls: one set per (device, stream handle); work on one stream runs in order;
//  - CUDA graph capture: one set per (capture, stream), kept for the life of the process (the graph
//    may be replayed at any time, on any stream; replays of one instantiation never overlap).
// What the keys cannot tell apart, and must not run at once: two instantiations of one captured
// graph, and streams that share a handle (cudaStreamPerThread from several threads, a handle
// reused after cudaStreamDestroy while the old stream's work still runs). Each capture costs one
// set (16 KB or more) that is never freed.
// The memory is allocated and zeroed once per set (and again when a call needs more counters than
// the set has: a new, larger set, the old one kept for the work in flight that uses it), on a
// private stream, outside any capture: no memset node, no per-call host work beyond a lookup.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace cute_ops {

// At least `count` zeroed counters for work on `stream` of the current device.
int* arrival_counters(int device, cudaStream_t stream, size_t count);

}  // namespace cute_ops
