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

NVLink multicast stays off in every process (MULTICAST_OFF): a program using it can put a shared
host's GPUs out of service, so nothing here calls cuMulticastCreate or PyTorch's multimem ops.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from .config import LlamaConfig

# Environment that keeps NCCL, PyTorch's symmetric memory and NVSHMEM off NVLink multicast.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

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
    torch.distributed process group of the collectives (None: the default group). The default,
    one rank, is the single-GPU model: the same code path with no communication."""

    rank: int = 0
    world_size: int = 1
    group: Any = None

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"TensorParallel: need 0 <= rank < world_size, got rank {self.rank} of {self.world_size}")

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
        """Sum of x over the ranks, in place; returns x."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(x, group=self.group)
        return x

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
