#pragma once
// The sizes and workspace layout of the peer line protocol (allreduce/peer_all_reduce.h says what it
// is; common/peer_lines.cuh has its device side), free of CUDA and torch headers: the schemas and
// input rules (every build, CPU-only ones too) read them. Two families write lines: peer_all_reduce,
// and gemv's pushed rows (gemv/gemv_exchange.h, kPushLines), which peer_all_reduce then sums.
#include <cstdint>

#if defined(__CUDACC__)
#define CUTE_OPS_PEER_HD __host__ __device__
#else
#define CUTE_OPS_PEER_HD
#endif

namespace cute_ops {

constexpr int kPeerMaxRanks = 8;
constexpr int kPeerLineBytes = 16;    // what travels: two 8-byte words of (4 bytes of data, epoch)
constexpr int kPeerPayloadBytes = 8;  // of the tensor, a line
// One line a thread: every thread's loads, stores and first poll go out at once (a thread polling
// several lines in turn pays an L2 round trip for each).
constexpr int kPeerThreads = 1024;
constexpr int kPeerLinesPerBlock = kPeerThreads;
// The largest tensor one call takes: a decode step's [64, 8192] 16-bit rows.
constexpr int64_t kPeerMaxBytes = int64_t{1} << 20;
constexpr int64_t kPeerMaxLines = kPeerMaxBytes / kPeerPayloadBytes;
constexpr int kPeerMaxBlocks = static_cast<int>(kPeerMaxLines / kPeerLinesPerBlock);

// Byte offsets in one rank's workspace (every rank's has this layout).
struct PeerLayout {
  int64_t world;
  // inbox[parity][source rank][kPeerMaxLines] lines.
  CUTE_OPS_PEER_HD int64_t inbox(int64_t parity, int64_t source) const {
    return (parity * world + source) * kPeerMaxLines * kPeerLineBytes;
  }
  // uses[kPeerMaxBlocks]: uint32, the calls each CTA has made.
  CUTE_OPS_PEER_HD int64_t uses() const { return inbox(2, 0); }
  CUTE_OPS_PEER_HD int64_t bytes() const { return uses() + kPeerMaxBlocks * 4; }
};

}  // namespace cute_ops
