#pragma once
// The ticket scheduler of gemm_pair. A CTA does not compute the tile its blockIdx names but the
// one its ticket names: it takes the next ticket from a global counter and looks it up in the
// order table (built on the host by a policy, tile_order.h). A tile only waits for tiles with
// smaller tickets, which are held by CTAs already running, so the launch cannot deadlock however
// few CTAs are co-resident (docs/gemm_pair.md, "Why the launch cannot deadlock").
//
// The SM80 kernel's grid has one CTA per ticket and each CTA fetches once (TicketScheduler). The
// SM90 kernel is persistent: its producer thread calls take_ticket per tile until the tickets run
// out, and hands the entries to its consumers itself.
#include "gemm_pair/gemm_pair.h"
#include "gemm_pair/trace.h"

namespace cute_ops::gemm_pair {

// One ticket's work: a tile of one GEMM, one K-split of it (an entry of the order table).
struct WorkTile {
  int gemm;     // 0: act(a b0^T) -> h; 1: h b1^T -> out
  int m_block;  // row block
  int n_tile;   // column tile of the GEMM's output (of h for GEMM0)
  int split;    // K-split
};

// One thread takes the next ticket: true, the ticket and its entry, or false once every tile is
// handed out.
__device__ __forceinline__ bool take_ticket(const GemmPairParams& p, int& ticket, int4& entry) {
  ticket = atomicAdd(p.ticket, 1);
  if (ticket >= p.num_tiles) return false;
  entry = p.order[ticket];
  return true;
}

class TicketScheduler {
 public:
  // The leader's entry, read by every thread after the barrier. Apart from the mainloop's buffers,
  // which a fast warp starts filling while a slow one may not yet have read it.
  struct SharedStorage {
    int4 entry;
  };

  __device__ explicit TicketScheduler(SharedStorage& storage) : storage_(storage) {}

  // Takes a ticket (the barrier's leader does) and returns its tile to every thread of `barrier`.
  template <typename Barrier>
  __device__ __forceinline__ WorkTile fetch(const GemmPairParams& p, Barrier barrier) const {
    if (barrier.is_leader()) {
      const unsigned long long t_entry = GEMM_PAIR_TRACE_NOW();
      const int4* entry = p.order + atomicAdd(p.ticket, 1);
      storage_.entry = *entry;
      GEMM_PAIR_TRACE_BEGIN(entry, t_entry);
    }
    barrier.sync();
    const int4 e = storage_.entry;
    return {e.x, e.y, e.z, e.w};
  }

 private:
  SharedStorage& storage_;
};

}  // namespace cute_ops::gemm_pair
