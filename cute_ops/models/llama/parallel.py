"""Tensor parallelism of the LLaMA model over the GPUs of one host (Megatron's split of a layer):
which part of each weight a rank holds, and the collectives that join the parts.

    column-parallel  wqkv: this rank's query heads and the kv heads they read; w_gate_up: its slice
                     of the intermediate size, packed by pack_gate_up per shard. No communication.
    row-parallel     wo and w_down: the input columns matching those heads and that slice. Each
                     rank's product is a partial sum; an all-reduce joins them (two a layer).
    vocab-parallel   the output projection: a slice of the vocabulary (padded to equal slices with
                     zero rows); the logits are all-gathered, so every rank holds the same logits
                     and samples the same tokens.
    replicated       the embedding and the norms.

Rank r holds query heads [r Hq/N, (r+1) Hq/N) and kv heads [r Hkv/N, (r+1) Hkv/N): with N dividing
Hkv those are exactly the kv heads its query heads read (query head h reads kv head h // (Hq/Hkv)),
so attention needs no communication and each rank's KV cache holds its kv heads only.

The all-reduce of a decode step's few rows is latency, not bandwidth: NCCL's ring takes ~13 us for
one 8 KB row over NVLink (docs/perf-notes.md), and as an ordinary launch it stops the next gemv from
starting its weight stream early. By default ("auto") a CUDA tensor of up to 1 MiB goes through
cute_ops.PeerAllReduce (one kernel, a programmatic dependent of the projection before it, the
next one launching as it starts); larger ones (prefill) through NCCL. At one row (a B = 1 decode
step) "auto" also has the o and down gemvs push their rows into the all-reduce's inboxes
themselves (AUTO_PUSH_MAX_ROWS: what "pushed" does at every gemv batch). "one_shot" takes PyTorch's
symmetric-memory one-shot all-reduce instead where it applies (bfloat16/float32), "nccl" NCCL for
every one: the comparisons of perf/run_tp.py and the tests.

NVLink multicast stays off in every process (MULTICAST_OFF): a program using it can put a shared
host's GPUs out of service, so nothing here calls cuMulticastCreate or PyTorch's multimem ops.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from .config import LlamaConfig

# Environment that keeps NCCL, PyTorch's symmetric memory and NVSHMEM off NVLink multicast.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# The largest all-reduce (bytes) PyTorch's one-shot path takes here: the symmetric buffer each rank
# maps for it is this size, one per dtype and device.
ONE_SHOT_MAX_BYTES = 1 << 20
# What TensorParallel.all_reduce calls (the module docstring says when): "auto" (PeerAllReduce),
# "one_shot" (PyTorch's symmetric-memory one-shot) or "nccl"; "pushed" is "auto" with every gemv
# decode step's row-parallel gemvs storing their rows into the ranks' inboxes themselves
# (TensorParallel.pushed_gemv), which "auto" does at one row only.
ALL_REDUCE_KINDS = ("auto", "one_shot", "nccl", "pushed")
# The most rows at which "auto" pushes too (TensorParallel.pushes). Measured on 2 x H200 at 75df535
# (perf/results/h200x2.json, two runs; docs/perf-notes.md session 68): at B = 1 pushing took
# 39 us off LLaMA-3-8B's TP=2 step (2577 -> 2538) and 16-31 us off the 70B's; at B = 8 it tied
# on the 8B and lost 200-320 us on the 70B.
AUTO_PUSH_MAX_ROWS = 1

# HF tensor name suffix -> (the dim it is split along, the size that is split: "q", "kv" or "inter").
_SPLITS = {
    "self_attn.q_proj.weight": (0, "q"), "self_attn.k_proj.weight": (0, "kv"), "self_attn.v_proj.weight": (0, "kv"),
    "self_attn.o_proj.weight": (1, "q"),
    "mlp.gate_proj.weight": (0, "inter"), "mlp.up_proj.weight": (0, "inter"), "mlp.down_proj.weight": (1, "inter"),
}


def disable_multicast() -> None:
    """Set MULTICAST_OFF in this process's environment (before NCCL starts); a value that turns
    multicast on is refused rather than overridden silently."""
    for name, value in MULTICAST_OFF.items():
        if os.environ.get(name, value) != value:
            raise RuntimeError(f"{name}={os.environ[name]} would allow NVLink multicast; cute_ops needs {name}={value}")
        os.environ[name] = value


@dataclass(frozen=True)
class TensorParallel:
    """This process's place among `world_size` ranks that share one model; `group` is the
    torch.distributed process group of the collectives (None: the default group); `all_reduce_kind`
    one of ALL_REDUCE_KINDS. The default, one rank, is the single-GPU model: the same code path with
    no communication."""

    rank: int = 0
    world_size: int = 1
    group: Any = None
    all_reduce_kind: str = "auto"
    # What the first all-reduce that takes each path makes (a collective: every rank makes it at the
    # same call): ("peer", device) -> PeerAllReduce; (device, dtype) -> the one-shot's symmetric buffer.
    _buffers: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"TensorParallel: need 0 <= rank < world_size, got rank {self.rank} of {self.world_size}")
        if self.all_reduce_kind not in ALL_REDUCE_KINDS:
            raise ValueError(f"TensorParallel: all_reduce_kind must be one of {ALL_REDUCE_KINDS}, "
                             f"got {self.all_reduce_kind!r}")

    @classmethod
    def from_torchrun(cls, world_size: int, backend: str = "nccl") -> "TensorParallel":
        """The ranks of a ``torchrun --nproc-per-node N`` launch (its RANK, WORLD_SIZE and LOCAL_RANK),
        with the process group started on this rank's GPU. world_size 1 without torchrun is the
        single-GPU model; otherwise WORLD_SIZE must equal world_size."""
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched != world_size:
            raise ValueError(f"tensor parallelism over {world_size} GPUs needs `torchrun --nproc-per-node "
                             f"{world_size}` (this process sees WORLD_SIZE={launched})")
        if world_size == 1:
            return cls()
        import torch.distributed as dist

        disable_multicast()
        local = int(os.environ["LOCAL_RANK"])
        if backend == "nccl":
            torch.cuda.set_device(local)
        if not dist.is_initialized():
            dist.init_process_group(backend)
        return cls(dist.get_rank(), dist.get_world_size())

    # -- which part of each weight this rank holds
    def check(self, cfg: LlamaConfig) -> None:
        """ValueError unless the model splits evenly over world_size ranks into parts the kernels
        take (a rank's slice of the intermediate size is the k of gemv's down projection and half
        the rows of fused_mlp's gate/up: a multiple of 8 for both, see their checks in csrc/)."""
        n = self.world_size
        for what, size in (("num_kv_heads", cfg.num_kv_heads), ("intermediate_size", cfg.intermediate_size)):
            if size % n:
                raise ValueError(f"tensor parallelism over {n} ranks needs {what} ({size}) to be a multiple of {n}")
        if n > 1 and cfg.intermediate_size // n % 8:
            raise ValueError(f"tensor parallelism over {n} ranks gives each {cfg.intermediate_size // n} of the "
                             f"intermediate size ({cfg.intermediate_size}); the MLP kernels need a multiple of 8")

    def part(self, total: int) -> slice:
        """This rank's slice of `total` split into world_size equal parts."""
        size = total // self.world_size
        return slice(self.rank * size, (self.rank + 1) * size)

    def vocab_rows(self, vocab: int) -> int:
        """Rows of the output projection per rank: the vocabulary over the ranks, rounded up."""
        return -(-vocab // self.world_size)

    def vocab_part(self, vocab: int) -> slice:
        """The vocabulary rows this rank projects onto (the last rank's may be fewer than vocab_rows)."""
        rows = self.vocab_rows(vocab)
        return slice(min(self.rank * rows, vocab), min((self.rank + 1) * rows, vocab))

    def hf_split(self, cfg: LlamaConfig, name: str) -> tuple[int, slice] | None:
        """(dim, index) of HF tensor `name` that this rank holds; None for a tensor every rank holds
        whole. Tied checkpoints: the output projection's rows come from the embedding (the caller's)."""
        if name == "lm_head.weight":
            return 0, self.vocab_part(cfg.vocab_size)
        split = next((s for suffix, s in _SPLITS.items() if name.endswith(suffix)), None)
        if split is None or self.world_size == 1:
            return None
        dim, what = split
        return dim, self.part({"q": cfg.q_size, "kv": cfg.kv_size, "inter": cfg.intermediate_size}[what])

    # -- collectives (no-ops for one rank); capturable in a CUDA graph
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum of x over the ranks, in place; returns x. PeerAllReduce or the one-shot where the
        kind and x allow (takes_peer, takes_one_shot), NCCL otherwise. All are captured by CUDA
        graphs, but the first call of a path on a device (of a dtype, for the one-shot) makes its
        buffers and must run outside capture (a warm-up step, as Generator's first decode of each
        batch size is)."""
        if self.world_size == 1:
            return x
        if self.takes_peer(x):
            return self._made(("peer", x.device), lambda: self._peer_all_reduce(x.device))(x)
        if self.takes_one_shot(x):
            buf, name = self._symmetric_buffer(x)
            # Copies x into this rank's buffer, sums every rank's over NVLink into x (out= x: each
            # thread writes only the elements it copied, after the barrier).
            torch.ops.symm_mem.one_shot_all_reduce_copy_out(buf[:x.numel()].view(x.shape), x, "sum", name, x)
            return x
        import torch.distributed as dist

        dist.all_reduce(x, group=self.group)
        return x

    def pushes(self, x: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether the row-parallel gemv(x, weight) of a gemv decode step and its all-reduce run as
        pushed_gemv: several ranks, kind "pushed" (or "auto" with at most AUTO_PUSH_MAX_ROWS rows), the
        peer kernel built, and operands that PeerAllReduce.gemv takes (PeerAllReduce.takes_gemv: from
        shapes and dtypes, the same on every rank)."""
        kind = self.all_reduce_kind
        if not (kind == "pushed" or (kind == "auto" and x.dim() == 2 and x.shape[0] <= AUTO_PUSH_MAX_ROWS)):
            return False
        if not (self.world_size > 1 and self._peer_built("gemv_push_lines")):
            return False
        from ...allreduce import PeerAllReduce

        return PeerAllReduce.takes_gemv(x, weight)

    def pushed_gemv(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """all_reduce(gemv(x, weight, residual=residual)) as PeerAllReduce.gemv: the gemv stores its
        rows into the ranks' inboxes itself (where pushes(x, weight); the same bits wherever gemv runs
        its plain kernel, as PeerAllReduce.gemv says)."""
        return self._made(("peer", x.device), lambda: self._peer_all_reduce(x.device)).gemv(x, weight, residual)

    @staticmethod
    def _peer_built(*also: str) -> bool:
        """Whether peer_all_reduce's CUDA kernels (and those of the ops in `also`) were built."""
        from ..._library import cuda_kernels_available

        return all(cuda_kernels_available(op) for op in ("peer_all_reduce", *also))

    def takes_peer(self, x: torch.Tensor) -> bool:
        """Whether all_reduce(x) runs cute_ops.PeerAllReduce: several ranks, kind "auto" or "pushed",
        the peer kernel built, and x a tensor it takes (PeerAllReduce.takes: CUDA, 16-bit or float32,
        up to 1 MiB)."""
        if not (self.world_size > 1 and self.all_reduce_kind in ("auto", "pushed") and x.is_cuda):
            return False
        from ...allreduce import PeerAllReduce

        return self._peer_built() and PeerAllReduce.takes(x)

    def takes_one_shot(self, x: torch.Tensor) -> bool:
        """Whether all_reduce(x) runs PyTorch's symmetric-memory one-shot kernel: several ranks, kind
        "one_shot", a contiguous CUDA tensor of bfloat16 or float32 (the kernel's types) of at most
        ONE_SHOT_MAX_BYTES, its start and size multiples of 16 bytes (the kernel's vector width),
        and a PyTorch that has the op."""
        nbytes = x.numel() * x.element_size()
        return (self.world_size > 1 and self.all_reduce_kind == "one_shot" and x.is_cuda and x.is_contiguous()
                and x.dtype in (torch.bfloat16, torch.float32) and 0 < nbytes <= ONE_SHOT_MAX_BYTES
                and nbytes % 16 == 0 and x.storage_offset() * x.element_size() % 16 == 0
                and hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy_out"))

    def _made(self, key, make):
        """self._buffers[key], made by make() on first use (outside CUDA graph capture)."""
        if key not in self._buffers:
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"TensorParallel.all_reduce: the first all-reduce of its kind {key} makes its "
                                   "buffers, which cannot happen inside CUDA graph capture: run one step eagerly "
                                   "before capturing")
            disable_multicast()  # the mappings must not ask for a multicast object
            self._buffers[key] = make()
        return self._buffers[key]

    def _peer_all_reduce(self, device):
        from ...allreduce import PeerAllReduce

        return PeerAllReduce(device, self.group)

    def _symmetric_buffer(self, x: torch.Tensor) -> tuple[torch.Tensor, str]:
        """This rank's one-shot buffer for x's dtype and device (made and exchanged with the other
        ranks on first use) and the group's name."""
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        name = (self.group or dist.group.WORLD).group_name

        def make():
            buf = symm_mem.empty(ONE_SHOT_MAX_BYTES // x.element_size(), dtype=x.dtype, device=x.device)
            symm_mem.rendezvous(buf, name)
            return buf

        return self._made((x.device, x.dtype), make), name

    def gather_vocab(self, logits: torch.Tensor, vocab: int) -> torch.Tensor:
        """Every rank's [rows, vocab_rows] logits side by side: [rows, vocab] (the padding dropped)."""
        if self.world_size == 1:
            return logits
        import torch.distributed as dist

        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        out = logits.new_empty(self.world_size * logits.shape[0], logits.shape[1])
        gather(out, logits.contiguous(), group=self.group)
        return out.view(self.world_size, *logits.shape).transpose(0, 1).reshape(logits.shape[0], -1)[:, :vocab]

    def broadcast_int(self, value: int) -> int:
        """Rank 0's value of a host integer, on every rank (a seed, say)."""
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group or dist.group.WORLD, 0), group=self.group)
        return box[0]
