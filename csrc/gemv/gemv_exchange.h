#pragma once
// The all-reduce of a tensor-parallel decode step, folded into the gemv on each side of it.
//
// A row-parallel projection (o, down) leaves each rank a partial sum of the next layer input; the
// ranks must add them up before the next projection (qkv, gate/up, the output projection), which
// normalises that sum. Instead of an all-reduce kernel between the two gemvs (which costs a
// launch, and breaks the programmatic-dependent-launch chain, so the next gemv cannot stream its
// weights while it runs):
//
//   push  the row-parallel gemv stores its output rows into slot `slot` of every rank's exchange
//         buffer (its own row of the slot: inbox[slot][rank]; peers' over NVLink), then each CTA
//         raises its flag in every rank's buffer (flags[slot][rank][cta] = how many times this CTA
//         has pushed this slot).
//   pull  the next gemv starts its weight stream, waits until every rank's CTAs have raised their
//         flags for the slot in its own buffer, and reads x as the sum of the slot's world rows.
//
// Counting instead of resetting: a flag holds how many times it was raised, so nothing is ever
// cleared. The count the pull waits for is the one its own rank's push just reached (pushes[slot]
// in its own buffer, written by the push before it in the stream): every rank runs the same steps,
// so every rank's count for a slot is the same at the same step. Slots are not reused within a
// step (two a layer), and a rank can only push a slot again after it pulled every later slot of
// the step, whose pushes by the other ranks come after their pulls of this one: a slot's rows
// are never overwritten before every rank has read them.
//
// Memory: every rank's buffer is mapped in every process (CUDA IPC); pushes are plain stores,
// then a system-scope fence and a release store of the flag; pulls acquire the flags at system
// scope, which orders their reads of the rows after every rank's stores (and invalidates the SM's
// L1, so no line of an earlier step is read).
#include <cstddef>
#include <cstdint>

#include "gemv/gemv_limits.h"

#if defined(__CUDACC__)
#define CUTE_OPS_EXCHANGE_HD __host__ __device__
#else
#define CUTE_OPS_EXCHANGE_HD
#endif

namespace cute_ops {

// Ranks one exchange joins (the pointers travel in the kernel's parameters).
constexpr int kGemvMaxRanks = 8;
// CTAs of a pushing gemv (one flag each): more than any Hopper GPU runs at once (2 an SM).
constexpr int kGemvMaxPushCtas = 1024;
// Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t; gemv_op.cpp asserts it).
constexpr int kGemvIpcHandleBytes = 64;

// Byte offsets of the parts of one rank's exchange buffer: `slots` slots of `hidden` columns over
// `world` ranks, elements of `elem_bytes`. Every rank's buffer has this layout.
struct GemvExchangeLayout {
  int64_t slots, world, hidden, elem_bytes;

  // inbox[slot][rank][kGemvMaxRows][hidden]: the rows each rank pushed.
  CUTE_OPS_EXCHANGE_HD int64_t inbox(int64_t slot, int64_t rank) const {
    return ((slot * world + rank) * kGemvMaxRows * hidden) * elem_bytes;
  }
  CUTE_OPS_EXCHANGE_HD int64_t inbox_end() const { return (inbox(slots, 0) + 15) / 16 * 16; }
  // flags[slot][rank][kGemvMaxPushCtas]: uint32 raise counts, written by the ranks' CTAs.
  CUTE_OPS_EXCHANGE_HD int64_t flags(int64_t slot, int64_t rank) const {
    return inbox_end() + (slot * world + rank) * kGemvMaxPushCtas * 4;
  }
  // pushes[slot][kGemvMaxPushCtas]: uint32, this rank's own counts (read back by its next push).
  CUTE_OPS_EXCHANGE_HD int64_t pushes(int64_t slot) const { return flags(slots, 0) + slot * kGemvMaxPushCtas * 4; }
  // grids[slot]: uint32, the CTAs of this rank's last push of the slot (the flags a pull waits on).
  CUTE_OPS_EXCHANGE_HD int64_t grids(int64_t slot) const { return pushes(slots) + slot * 4; }
  CUTE_OPS_EXCHANGE_HD int64_t bytes() const { return (grids(slots) + 15) / 16 * 16; }
};

// What a gemv launch does with the exchange. kPushLines is another exchange: the row-parallel gemv
// stores its output rows (also stored as usual) as the lines of the next peer_all_reduce call into
// every rank's peer workspace (common/peer_lines.cuh; `buffers` then holds the workspaces), and
// that call, pushed, sums them (allreduce/peer_all_reduce.h). No flags and no fences: each line's
// words carry the call's epoch. The next gemv is a plain one.
enum class GemvExchangeMode : int8_t { kNone, kPush, kPull, kPushLines };

struct GemvExchangeParams {
  GemvExchangeMode mode = GemvExchangeMode::kNone;
  void* buffers[kGemvMaxRanks] = {};  // every rank's buffer, as mapped in this process
  int world = 0, rank = 0, slots = 0, slot = 0;
  void* x_sum = nullptr;              // pull: the summed x [m, k] is also stored here (nullptr: not)
};

}  // namespace cute_ops
