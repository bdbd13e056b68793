"""PeerAllReduce: the all-reduce of a tensor-parallel decode step's rows over the GPUs of one host,
as one kernel that keeps the programmatic-dependent-launch chain of the kernels around it
(csrc/allreduce/peer_all_reduce.h says how, and why it needs no fence or flag). The input rules
are the C++ op's (csrc/allreduce/peer_all_reduce_checks.cpp)."""
from __future__ import annotations

import torch

from ._library import require_kernels
from .gemv import MAX_ROWS as GEMV_MAX_ROWS


def _max_bytes() -> int:
    """The largest tensor one call takes (kPeerMaxBytes, csrc/common/peer_layout.h)."""
    global _MAX_BYTES
    if _MAX_BYTES is None:
        _MAX_BYTES = int(torch.ops.cute_ops.peer_all_reduce_max_bytes())
    return _MAX_BYTES


_MAX_BYTES: int | None = None


class PeerAllReduce:
    """Sums tensors of up to :attr:`max_bytes` over the ranks of `group`, in place.

    Every rank holds a workspace that every other rank maps (PyTorch's symmetric memory, peer
    mappings over NVLink; no multicast object is made, see cute_ops.models.llama.parallel), and
    each call stores its rank's values into the others' workspaces and sums what they stored into
    its own. Building it is a collective over `group`; after that every rank must make the same
    calls, with tensors of the same sizes, in the same order (as the ranks of a tensor-parallel
    model do), and a rank's calls must not overlap in time (one stream, or streams ordered by
    events): each call's epochs come from counts the previous call left. Calls may be captured in
    CUDA graphs.

    Args:
        device: this rank's CUDA device.
        group: the torch.distributed process group of the ranks (None: the default group); 1, 2,
            4 or 8 ranks of one host.
    """

    def __init__(self, device, group=None):
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        device = torch.device(device)
        require_kernels("peer_all_reduce")
        group = group or dist.group.WORLD
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.max_bytes = _max_bytes()
        nbytes = torch.ops.cute_ops.peer_all_reduce_workspace_bytes(self.world)
        self.workspace = symm_mem.empty(nbytes, dtype=torch.uint8, device=device)
        # Zeroed (no line carries a call's epoch yet) before any peer can store into it: the
        # rendezvous is the ranks' barrier, so the zeroing must have ended on the device first.
        self.workspace.zero_()
        torch.cuda.synchronize(device)
        handle = symm_mem.rendezvous(self.workspace, group.group_name)
        self.workspaces = [int(p) for p in handle.buffer_ptrs]
        if self.workspaces[self.rank] != self.workspace.data_ptr():
            raise RuntimeError("PeerAllReduce: the symmetric memory's address for this rank is not its workspace's")
        self._handle = handle  # keeps the peers' mappings alive

    @staticmethod
    def takes(x: torch.Tensor) -> bool:
        """Whether a call takes x: a contiguous CUDA tensor of float16, bfloat16 or float32, a
        multiple of 8 bytes up to max_bytes, starting 8-byte aligned in its storage. Every rule is
        the same on every rank for the same view of the same shapes (the storage offset, not the
        address), so the ranks of a model always agree on the path."""
        nbytes = x.numel() * x.element_size()
        return (x.is_cuda and x.is_contiguous() and x.dtype in (torch.float16, torch.bfloat16, torch.float32)
                and 0 < nbytes <= _max_bytes() and nbytes % 8 == 0 and x.storage_offset() * x.element_size() % 8 == 0)

    @staticmethod
    def takes_gemv(x: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether gemv(x, weight, ...) takes its operands' sizes and types: CUDA, 16-bit, x of at most
        8 rows (gemv's decode batches), weight's rows (the output's columns) a multiple of 4 and the
        output at most max_bytes. From shapes and dtypes only, the same on every rank; gemv's own
        checks (strides, alignment) still apply."""
        nbytes = x.shape[0] * weight.shape[0] * x.element_size()
        return (x.is_cuda and x.dim() == 2 and weight.dim() == 2 and x.dtype in (torch.float16, torch.bfloat16)
                and x.shape[0] <= GEMV_MAX_ROWS and weight.shape[0] % 4 == 0 and 0 < nbytes <= _max_bytes())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over the ranks, in place (each element in float32, in rank order, rounded to x's
        dtype once for 16-bit x: the same bits on every rank); returns x."""
        torch.ops.cute_ops.peer_all_reduce(x, self.workspace, self.workspaces, self.rank)
        return x

    def gemv(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """The sum over the ranks of ``cute_ops.gemv(x, weight, residual=residual)``, each rank with its
        own operands (a row-parallel projection: its columns of the input, its slice of the weight's
        columns). The rows are gemv's plain kernel's: bit for bit ``self(cute_ops.gemv(x, weight,
        residual=residual))`` wherever cute_ops.gemv runs that kernel too. For projections of more
        16-row units than the GPU holds CTAs it may run stream-K instead (gemv_stream_k_ctas in
        csrc/gemv/gemv.cu), whose rows can differ in the last bit; LLaMA-3-8B's and 70B's o and down
        projections at TP=2 run the plain kernel either way on 132-SM GPUs. The gemv stores its
        rows into every rank's workspace itself as its CTAs end (``gemv_push_lines``), and the call that
        sums them (``peer_all_reduce`` with ``pushed=True``) starts reading them before the gemv has
        ended: one hand-over between kernels less than the two calls (csrc/allreduce/peer_all_reduce.h,
        pushed calls). Takes what both take: x [m <= 8, k], 16-bit, the output [m, n] with n a multiple
        of 4 and at most max_bytes. It counts as a call of this all-reduce (the same order on every rank)."""
        require_kernels("gemv_push_lines")  # (the gemv family's: a build may leave it out)
        out = torch.ops.cute_ops.gemv_push_lines(x, weight, residual, self.workspace, self.workspaces, self.rank)
        torch.ops.cute_ops.peer_all_reduce(out, self.workspace, self.workspaces, self.rank, True)
        return out
