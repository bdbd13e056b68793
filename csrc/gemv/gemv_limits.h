#pragma once
// What gemv takes, free of CUDA and torch headers: read by the input rules (gemv_checks.cpp), the
// kernel and the Python wrapper's documentation (cute_ops/gemv.py MAX_ROWS restates it).
namespace cute_ops {

// Rows of x one call takes: the N of the mma that covers every row at once (gemv_kernel.cuh).
constexpr int kGemvMaxRows = 8;

// The most of its share of the weight a CTA of one call may ask L2 for ahead of its loads
// (gemv's l2_prefetch_kb): L2 holds about 50 MB, and 1024 KB is already 264 MB over an H100's CTAs.
constexpr int kGemvMaxL2PrefetchKb = 1024;

}  // namespace cute_ops
