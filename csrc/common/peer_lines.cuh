#pragma once
// Device side of the peer line protocol (allreduce/peer_all_reduce.h says what it is and why it is
// safe; common/peer_layout.h has the sizes). A line is 8 bytes of a tensor travelling as two
// 8-byte words w = (4 bytes of data) | (epoch << 32): an aligned 8-byte store is single-copy atomic,
// so a word that shows the call's epoch holds the call's data. Line `line` belongs to
// peer_all_reduce's CTA line / kPeerLinesPerBlock, whose call count (uses[cta]) gives the epoch
// (count + 1) and the inbox (count's parity) of every line it sums.
#include <cstdint>

#include "common/peer_layout.h"

namespace cute_ops {

__device__ __forceinline__ void store_peer_line(void* p, uint32_t lo, uint32_t hi, uint32_t epoch) {
  const uint64_t a = (static_cast<uint64_t>(epoch) << 32) | lo, b = (static_cast<uint64_t>(epoch) << 32) | hi;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ void load_peer_line(const void* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// peer_all_reduce's CTA `cta`'s call count in a rank's own workspace.
__device__ __forceinline__ uint32_t* peer_uses(void* own, const PeerLayout& layout, int64_t cta) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(own) + layout.uses()) + cta;
}

// Where rank `source`'s line `line` of a call of parity `parity` lands in a workspace.
__device__ __forceinline__ char* peer_line_at(void* workspace, const PeerLayout& layout, uint32_t parity, int source,
                                              int64_t line) {
  return static_cast<char*>(workspace) + layout.inbox(parity, source) + line * kPeerLineBytes;
}

}  // namespace cute_ops
