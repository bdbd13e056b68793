#pragma once
// Errors in data that lives on the device (sequence lengths, block tables, positions), which the
// host cannot check without a sync.
//
// Two modes. "record" (the default): the kernel records the first error in a small per-device
// status block, writes NaN (or nothing) for the offending sequence only, and carries on; every
// other sequence's outputs and cache rows are exactly what they would be without the bad one, the
// CUDA context stays usable, and cute_ops.check_errors() reads the status and raises a Python
// error naming the op, the sequence and the value. "trap" (a debug opt-in): print the message and
// __trap(), which kills the CUDA context, as PyTorch's own device-side index checks do.
//
// The status block is plain device memory, allocated once per device (common/device_errors.cpp)
// and handed to every kernel that checks device data through a DeviceErrorSink in its params.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

namespace cute_ops {

// Which op found the error; cute_ops/errors.py turns (op, code, fields) into the message.
enum class DeviceErrorOp : int64_t {
  kFlashDecode = 1,
  kRotaryEmbedding = 2,
  kFlashFwdVarlen = 3,
};

// What was wrong. The fields a code fills are listed with it.
enum class DeviceErrorCode : int64_t {
  kNegativeLength = 1,  // value: the length
  kCapacity = 2,        // value: rows needed; aux: rows available; aux2: 1 when paged (rows of the block table)
  kBadPage = 3,         // value: the page number; aux: pages in the cache; aux2: the block table column
  kRotaryPosition = 4,  // value: the position; aux: rows of the cos/sin table
  kQueryOffsets = 5,    // value, aux: cu_seqlens_q[b], cu_seqlens_q[b + 1]; aux2: rows of q
  kKeyOffsets = 6,      // value, aux: cu_seqlens_k[b], cu_seqlens_k[b + 1]; aux2: rows of k
  kQueryTooLong = 7,    // value: the sequence's queries; aux: max_seqlen_q
  kKeyTooLong = 8,      // value: the sequence's keys; aux: max_seqlen_k
};

// The per-device status block (64 bytes). `reports` counts every report since the last reset; the
// report that finds `claimed` at 0 writes the fields.
struct DeviceErrorStatus {
  unsigned long long reports;
  unsigned long long claimed;
  int64_t op, code, sequence, value, aux, aux2;
};
static_assert(sizeof(DeviceErrorStatus) == 64);

struct DeviceErrorSink {
  DeviceErrorStatus* status;  // this device's block
  bool trap;                  // debug mode: print and trap instead of recording
};

// The sink for `device` (allocates its status block on first use) in the process's current mode.
// Host only; defined in common/device_errors.cpp.
DeviceErrorSink device_error_sink(int device);

#ifdef __CUDACC__
// Trap mode's message. The same words as cute_ops/errors.py's, which formats recorded errors.
__device__ inline void print_device_error(DeviceErrorOp op, DeviceErrorCode code, long long seq, long long value,
                                          long long aux, long long aux2) {
  const char* name = op == DeviceErrorOp::kFlashDecode       ? "flash_decode"
                     : op == DeviceErrorOp::kRotaryEmbedding ? "rotary_embedding"
                                                             : "flash_fwd_varlen";
  switch (code) {
    case DeviceErrorCode::kNegativeLength:
      printf("cute_ops.%s: cache_seqlens[%lld] = %lld is negative\n", name, seq, value);
      break;
    case DeviceErrorCode::kCapacity:
      printf("cute_ops.%s: sequence %lld needs %lld cache rows (cache_seqlens + new tokens) but its %s holds %lld\n",
             name, seq, value, aux2 ? "block_table row" : "cache", aux);
      break;
    case DeviceErrorCode::kBadPage:
      printf("cute_ops.%s: block_table[%lld][%lld] = %lld is not a page of the cache (%lld pages)\n", name, seq,
             aux2, value, aux);
      break;
    case DeviceErrorCode::kRotaryPosition:
      printf("cute_ops.%s: position %lld of %s %lld is outside the %lld rows of the cos/sin table\n", name, value,
             op == DeviceErrorOp::kRotaryEmbedding ? "token" : "sequence", seq, aux);
      break;
    case DeviceErrorCode::kQueryOffsets:
    case DeviceErrorCode::kKeyOffsets:
      printf("cute_ops.%s: sequence %lld spans rows %lld..%lld of %s, not within 0..%lld in order\n", name, seq,
             value, aux, code == DeviceErrorCode::kQueryOffsets ? "q (cu_seqlens_q)" : "k (cu_seqlens_k)", aux2);
      break;
    case DeviceErrorCode::kQueryTooLong:
    case DeviceErrorCode::kKeyTooLong:
      printf("cute_ops.%s: sequence %lld has %lld %s, more than %s = %lld\n", name, seq, value,
             code == DeviceErrorCode::kQueryTooLong ? "queries" : "keys",
             code == DeviceErrorCode::kQueryTooLong ? "max_seqlen_q" : "max_seqlen_k", aux);
      break;
  }
}

// Records (or, in trap mode, prints and traps on) one error. Cheap to call from many threads: the
// first report writes the fields, the rest only count.
__device__ __noinline__ inline void report_device_error(DeviceErrorSink sink, DeviceErrorOp op,
                                                        DeviceErrorCode code, int64_t sequence, int64_t value,
                                                        int64_t aux = 0, int64_t aux2 = 0) {
  if (sink.trap) {
    print_device_error(op, code, sequence, value, aux, aux2);
    __trap();
  }
  DeviceErrorStatus* s = sink.status;
  if (atomicCAS(&s->claimed, 0ull, 1ull) == 0ull) {
    s->op = static_cast<int64_t>(op), s->code = static_cast<int64_t>(code), s->sequence = sequence;
    s->value = value, s->aux = aux, s->aux2 = aux2;
    __threadfence();  // fields before the count, for a reader that peeks without waiting
  }
  atomicAdd(&s->reports, 1ull);
}
#endif

}  // namespace cute_ops
