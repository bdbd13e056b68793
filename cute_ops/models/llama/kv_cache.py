"""The paged KV cache of a LLaMA model: one K and one V tensor of pages for all layers, and a
host-side page allocator. Pages are given to a sequence when it is admitted, for its prompt and
every token it may generate, so a decode step never allocates and never waits for the device;
block tables are built on the host and copied to the device when the batch changes."""
from __future__ import annotations

import torch

from .config import LlamaConfig
from .parallel import TensorParallel


class OutOfPages(RuntimeError):
    """The cache has fewer free pages than a sequence needs."""


class PageAllocator:
    """A free list of page indices. Page 0 is kept back as scratch: the padded rows of a decode
    batch (a CUDA graph's batch bucket larger than the live batch) point at it and write there."""

    SCRATCH_PAGE = 0

    def __init__(self, num_pages: int, page_size: int):
        if num_pages < 2:
            raise ValueError(f"PageAllocator: need at least 2 pages (one is scratch), got {num_pages}")
        if page_size < 16 or page_size % 16:
            raise ValueError(f"PageAllocator: page_size must be a positive multiple of 16, got {page_size}")
        self.num_pages, self.page_size = num_pages, page_size
        self._free = list(range(num_pages - 1, 0, -1))  # pop() hands out low pages first
        self._pages: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    def can_allocate(self, tokens: int) -> bool:
        return self.pages_for(tokens) <= len(self._free)

    def allocate(self, seq_id: int, tokens: int) -> list[int]:
        """Pages for `tokens` keys of a new sequence; OutOfPages (and nothing taken) if too few are free."""
        if seq_id in self._pages:
            raise ValueError(f"PageAllocator: sequence {seq_id} already holds pages")
        if tokens < 1:
            raise ValueError(f"PageAllocator: a sequence needs at least 1 token, got {tokens}")
        need = self.pages_for(tokens)
        if need > len(self._free):
            raise OutOfPages(f"the KV cache has {len(self._free)} free pages of {self.page_size} tokens; "
                             f"{tokens} tokens need {need}")
        pages = [self._free.pop() for _ in range(need)]
        self._pages[seq_id] = pages
        return pages

    def free(self, seq_id: int) -> None:
        self._free.extend(reversed(self._pages.pop(seq_id)))

    def pages(self, seq_id: int) -> list[int]:
        return self._pages[seq_id]


class PagedKVCache:
    """K and V pages for every layer: ``k[layer]`` is ``[num_pages, page_size, kv_heads, head_dim]``,
    the paged layout :func:`cute_ops.flash_decode` reads and appends to. With `tp`, the cache of
    one rank: its kv heads only (the model's ``tp``).

    ``dtype=torch.float8_e4m3fn`` makes an fp8 cache (head_dim 128): half the bytes a decode step
    reads, keys and values stored as ``x / scale`` with a float32 scale per (layer, kv head),
    ``k_scale`` / ``v_scale`` ``[layers, kv_heads]`` (one value, or per layer, broadcasts). None,
    the default, is 1.0: it stores the values themselves, saturating past +-448 (as vLLM does without
    calibrated scales); LLaMA's keys and values are far inside that. The prefill attends its
    prompt's unquantized K and V and stores them quantized; decode steps attend the cache."""

    def __init__(self, config: LlamaConfig, num_pages: int, page_size: int = 64, max_seq_len: int | None = None,
                 dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cuda",
                 tp: TensorParallel | None = None, k_scale: torch.Tensor | float | None = None,
                 v_scale: torch.Tensor | float | None = None):
        self.allocator = PageAllocator(num_pages, page_size)
        self.page_size = page_size
        self.max_seq_len = min(max_seq_len or config.max_position, config.max_position)
        self.max_pages_per_seq = self.allocator.pages_for(self.max_seq_len)
        tp = tp or TensorParallel()
        tp.check(config)
        shape = (config.num_layers, num_pages, page_size, config.num_kv_heads // tp.world_size, config.head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.fp8 = dtype == torch.float8_e4m3fn
        self.k_scale = self.v_scale = None
        if self.fp8:
            if config.head_dim != 128:
                raise ValueError(f"PagedKVCache: an fp8 cache needs head_dim 128, the model has {config.head_dim}")
            self.k_scale, self.v_scale = (
                torch.as_tensor(1.0 if s is None else s, dtype=torch.float32).to(device)
                .expand(shape[0], shape[3]).contiguous() for s in (k_scale, v_scale))
        elif k_scale is not None or v_scale is not None:
            raise ValueError("PagedKVCache: k_scale and v_scale go with an fp8 cache (dtype=torch.float8_e4m3fn)")

    @classmethod
    def for_tokens(cls, config: LlamaConfig, tokens: int, page_size: int = 64, **kw) -> "PagedKVCache":
        """A cache holding `tokens` keys in all (plus the scratch page)."""
        return cls(config, -(-tokens // page_size) + 1, page_size, **kw)

    @property
    def bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def block_table_rows(self, seq_ids: list[int], rows: int | None = None) -> torch.Tensor:
        """The int32 block table of `seq_ids` on the host, padded with scratch rows to `rows`."""
        rows = rows or len(seq_ids)
        table = torch.full((rows, self.max_pages_per_seq), PageAllocator.SCRATCH_PAGE, dtype=torch.int32)
        for r, s in enumerate(seq_ids):
            pages = self.allocator.pages(s)
            table[r, :len(pages)] = torch.tensor(pages, dtype=torch.int32)
        return table

    def slots(self, seq_ids: list[int], lengths: list[int]) -> torch.Tensor:
        """int64 cache rows (page * page_size + row) of tokens 0 .. length-1 of each sequence, packed
        in order: where a prefill writes the prompts' K and V (host tensor)."""
        out = []
        for s, n in zip(seq_ids, lengths):
            pos = torch.arange(n)
            pages = torch.tensor(self.allocator.pages(s), dtype=torch.int64)
            out.append(pages[pos // self.page_size] * self.page_size + pos % self.page_size)
        return torch.cat(out) if out else torch.empty(0, dtype=torch.int64)
