"""Errors in data that lives on the device: sequence lengths, block tables, positions, varlen offsets.

The host cannot check those without a sync, so the kernels check them. In the default "record"
mode a kernel that finds one records the first error in a small per-device status block, gives the
offending sequence (or token) NaN outputs and skips its cache writes, and carries on: every other
sequence of the batch gets exactly the result it would have had alone, and the CUDA context stays
usable. :func:`check_errors` reads the status and raises :class:`DeviceDataError` naming the op,
the sequence and the bad value; call it where the caller synchronises anyway (e.g. after reading
the sampled tokens of a decode step), or with ``wait=False`` to peek without waiting.

The "trap" mode (:func:`set_device_error_mode`, or ``CUTE_OPS_DEVICE_ERRORS=trap`` in the
environment) prints the message from the kernel and traps, which kills the CUDA context: a
debugging aid, as PyTorch's own device-side index checks behave.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ._library import schemas_loaded

_OPS = {1: "flash_decode", 2: "rotary_embedding", 3: "flash_fwd_varlen"}


def _describe(op: str, code: int, seq: int, value: int, aux: int, aux2: int) -> str:
    """The message of one recorded error (the device prints the same words in trap mode:
    csrc/common/device_errors.h)."""
    if code == 1:
        return f"cache_seqlens[{seq}] = {value} is negative"
    if code == 2:
        where = "block_table row" if aux2 else "cache"
        return f"sequence {seq} needs {value} cache rows (cache_seqlens + new tokens) but its {where} holds {aux}"
    if code == 3:
        return f"block_table[{seq}][{aux2}] = {value} is not a page of the cache ({aux} pages)"
    if code == 4:
        what = "token" if op == "rotary_embedding" else "sequence"
        return f"position {value} of {what} {seq} is outside the {aux} rows of the cos/sin table"
    if code in (5, 6):
        rows = "q (cu_seqlens_q)" if code == 5 else "k (cu_seqlens_k)"
        return f"sequence {seq} spans rows {value}..{aux} of {rows}, not within 0..{aux2} in order"
    if code in (7, 8):
        what, bound = ("queries", "max_seqlen_q") if code == 7 else ("keys", "max_seqlen_k")
        return f"sequence {seq} has {value} {what}, more than {bound} = {aux}"
    return f"error code {code} for sequence {seq} (value {value}, {aux}, {aux2})"


@dataclass(frozen=True)
class DeviceError:
    """The first error recorded on a device since the last reset, and how many reports came."""

    device: int
    reports: int
    op: str
    code: int
    sequence: int
    value: int
    aux: int
    aux2: int

    @property
    def message(self) -> str:
        if not self.op:  # peeked (wait=False) while the first report was still being written
            return f"a device-side error was reported on cuda:{self.device} (details still being written)"
        more = f" ({self.reports - 1} more reports)" if self.reports > 1 else ""
        return (f"cute_ops.{self.op} on cuda:{self.device}: "
                f"{_describe(self.op, self.code, self.sequence, self.value, self.aux, self.aux2)}; its outputs are NaN "
                f"and its cache rows were not written{more}")


class DeviceDataError(RuntimeError):
    """Raised by :func:`check_errors`; ``.error`` holds the recorded :class:`DeviceError`."""

    def __init__(self, error: DeviceError):
        super().__init__(error.message)
        self.error = error


def _available() -> bool:
    """Whether this build has the status ops' implementation (CUDA builds only)."""
    if not schemas_loaded():
        return False
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("cute_ops::device_errors", "CompositeImplicitAutograd")
    except RuntimeError:  # an extension built before the op existed
        return False


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"check_errors: device must be a CUDA device, got {device}")
    return torch.cuda.current_device() if device.index is None else device.index


@torch.compiler.disable
def read_errors(device: torch.device | str | int | None = None, *, wait: bool = True,
                reset: bool = True) -> DeviceError | None:
    """The first device-side error recorded on ``device`` (default: the current one) since the last
    reset, or None. ``wait`` synchronises the device first, so that every op queued so far has
    reported; ``wait=False`` reads what has landed without waiting for queued work. ``reset``
    clears the status after reading it."""
    if not _available():
        return None  # no CUDA kernels in this build, so nothing can have been recorded
    index = device if isinstance(device, int) else _device_index(device)
    reports, op, code, seq, value, aux, aux2 = torch.ops.cute_ops.device_errors(index, wait, reset)
    if reports == 0:
        return None
    return DeviceError(index, reports, _OPS.get(op, ""), code, seq, value, aux, aux2)


def check_errors(device: torch.device | str | int | None = None, *, wait: bool = True, reset: bool = True) -> None:
    """Raise :class:`DeviceDataError` if an op found bad device data (a negative or too long
    length, a block table entry that is no page, a position past the rotary table, malformed varlen
    offsets) on ``device`` since the last check; see :func:`read_errors` for the arguments. The
    process stays usable afterwards: only the offending sequences' outputs are NaN."""
    error = read_errors(device, wait=wait, reset=reset)
    if error is not None:
        raise DeviceDataError(error)


def set_device_error_mode(mode: str) -> None:
    """"record" (default): record device-side errors for :func:`check_errors` and keep going;
    "trap": print them from the kernel and trap, killing the CUDA context (for debugging). Takes
    effect for ops launched afterwards, in every thread."""
    if mode not in ("record", "trap"):
        raise ValueError(f"set_device_error_mode: mode must be 'record' or 'trap', got {mode!r}")
    if _available():
        torch.ops.cute_ops.set_device_error_mode(mode)


def get_device_error_mode() -> str:
    """The current mode: "record" or "trap"."""
    return torch.ops.cute_ops.get_device_error_mode() if _available() else "record"
