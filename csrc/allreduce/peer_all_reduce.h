#pragma once
// peer_all_reduce: the sum of a small tensor over the GPUs of one host (a tensor-parallel decode
// step's rows after a row-parallel projection), in place, as one kernel that keeps the chain of
// programmatic dependent launches (common/pdl.h) of the kernels around it.
//
// Why not NCCL's all-reduce or PyTorch's one-shot one: at a decode step's 8 KB both are latency
// (13 and 7 us alone on 2 x H200, docs/perf-notes.md), and neither is a programmatic dependent,
// so the next projection cannot start streaming its weights until they end. Here the kernel lets
// its dependent launch at once (the next gemv fills its ring of weight copies while the exchange
// runs) and spends one NVLink write latency on the exchange itself:
//
//   each rank stores its rows into every other rank's inbox as *lines*: 16 bytes holding 8 bytes
//   of the tensor, each 4 of them beside a 4-byte epoch in one 8-byte word (an 8-byte aligned
//   store is single-copy atomic, so a word whose epoch is the call's holds the call's data: no
//   fence, no separate flag), then polls its own inbox until every peer's words carry the epoch,
//   and sums every rank's values in rank order in float32, rounded to x's dtype once (16-bit x;
//   float32 x rounds at each add): the same bits on every rank, and NCCL's for two ranks (but
//   for the sign of a zero sum: -0 + -0 gives +0 here).
//
// Epochs without resets: CTA b of every call counts its calls in uses[b] (its own workspace), and
// a call's epoch is that count + 1; every rank makes the same calls, so the counts agree. A line
// always belongs to the same CTA (kPeerLinesPerBlock lines each), so its epochs only grow. Lines
// alternate between two inboxes by the count's parity: a rank overwrites a peer's line of call u
// only in call u + 2, after it has read that peer's lines of call u + 1, which the peer stored
// after its call u ended (each call waits for the kernel before it, and that one for its own
// predecessor): the peer has read call u's line. That chain holds only while every kernel that
// runs between two calls waits for its predecessor (griddepcontrol.wait, or an ordinary launch)
// before it ends, as gemv and flash_decode do; a programmatic dependent that never waits would
// let call u + 1 start before call u ends and read its count. Known limit: the epoch is a 32-bit
// count, so after 2^32 calls of one CTA (CTA 0: about 57 hours of back-to-back decode
// all-reduces) it wraps to 0 and a never-written line would match; the next kernel commit should
// skip epoch 0.
//
// Pushed calls: a row-parallel gemv can store its output rows as this call's lines itself
// (gemv_push_lines), into every rank's inbox, its own included, as each CTA ends; the call then only
// polls its inboxes and sums, and it starts polling before the gemv has ended (it waits for the gemv
// only before its store of x). Saves the hand-over from the gemv's end to this kernel's loads and
// stores, and overlaps the NVLink trip with the gemv's last CTAs. The gemv reads the count of the
// line's CTA after its own wait (so after the previous call ended), the same count the call reads:
// the epochs, inboxes and the argument above are the same.
#include <cuda_runtime.h>

#include "common/dtype.h"
#include "common/peer_layout.h"

namespace cute_ops {

struct PeerAllReduceParams {
  void* x = nullptr;                      // in place: [lines * 8 bytes]
  int64_t lines = 0;
  void* workspaces[kPeerMaxRanks] = {};   // every rank's workspace, as mapped in this process
  int world = 0, rank = 0;
  DType dtype = DType::kBFloat16;
  // The ranks' gemvs already stored this call's lines into every rank's inboxes (gemv_push_lines:
  // gemv/gemv_exchange.h, kPushLines): sum them into x, reading nothing of x (the kernel's kCollect).
  bool pushed = false;
};

void run_peer_all_reduce(const PeerAllReduceParams& p, cudaStream_t stream);

}  // namespace cute_ops
