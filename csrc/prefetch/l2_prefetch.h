#pragma once
// l2_prefetch: asks the GPU's L2 to fetch the first `bytes` of a tensor from DRAM, for a later
// kernel to read from L2 instead. Meant for the windows of a decode step in which DRAM idles: a
// layer's attention at small batches reads ~1 MB in a chain of dependent loads for ~10-15 us,
// while the projections around it stream hundreds of MB. Launched in stream order between two
// kernels as a programmatic dependent (common/pdl.h): it lets its dependent launch and issues its
// prefetches at once (both while the kernel before it still runs), then waits for that kernel,
// so that the kernel after it, which waits for it, still sees the one before complete.
// Prefetches change no data; the only effect is which reads hit L2.
#include <cstdint>

#include <cuda_runtime.h>

#include "prefetch/l2_prefetch_layout.h"

namespace cute_ops {

struct L2PrefetchParams {
  const void* ptr = nullptr;  // 16-byte aligned
  int64_t bytes = 0;          // a multiple of 16
};

void run_l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream);

}  // namespace cute_ops
