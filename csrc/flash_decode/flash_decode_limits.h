#pragma once
// The limits of flash_decode that both its input rules (flash_decode_checks.cpp, every build) and
// its kernels (flash_decode.h) rely on. No CUDA or torch header: the CPU-only build compiles it.

namespace cute_ops {

constexpr int kDecodeMaxSplits = 128;    // caps the float32 partials: num_splits x rows x head dim
constexpr int kDecodeMaxNewTokens = 16;  // new tokens a sequence, attending causally among themselves
constexpr int kDecodeMaxGroup = 16;      // query heads a kv head: new tokens x group fill 16-row tiles
constexpr int kDecodeFp8HeadDim = 128;   // the head dim of an fp8 (e4m3) KV cache

}  // namespace cute_ops
