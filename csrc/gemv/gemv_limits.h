#pragma once
// What gemv takes, free of CUDA and torch headers: read by the input rules (gemv_checks.cpp), the
// kernel and the Python wrapper's documentation (cute_ops/gemv.py MAX_ROWS restates it).
namespace cute_ops {

// Rows of x one call takes: the N of the mma that covers every row at once (gemv_kernel.cuh).
constexpr int kGemvMaxRows = 8;

}  // namespace cute_ops
