#pragma once
// The sizes of l2_prefetch (l2_prefetch.h says what it is), free of CUDA and torch headers: the
// schema's input rules (every build, CPU-only ones too) read them.
#include <cstdint>

namespace cute_ops {

// Bytes one bulk prefetch instruction asks for, and the granule of a call's size (the
// instruction's: a multiple of 16 bytes at a 16-byte aligned address).
constexpr int64_t kL2PrefetchChunkBytes = 64 * 1024;
constexpr int64_t kL2PrefetchGranule = 16;
constexpr int kL2PrefetchThreads = 128;

}  // namespace cute_ops
