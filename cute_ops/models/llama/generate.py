"""Generation with a LLaMA model over its paged cache: batched prefill of the prompts that join,
then decode steps for every running sequence, each step one CUDA graph replay per batch-size
bucket (shapes static; tokens, lengths and block tables in device buffers). Sequences join when
pages are free and leave at a stop token or max_new_tokens: a simple continuous-batching loop.
Under tensor parallelism every rank runs this same loop on the same prompts: the logits are
gathered onto every rank, so each samples the same tokens and the ranks stay in step.

By default a sequence's logits depend in their last bits on what it is batched with: a prefill's
kernels are picked by the rows packed together (gemv or GEMMs, cuBLAS's by M), and flash_decode's
split count by the batch, so greedy tokens batched and alone agree up to near-ties of the logits.
`batch_invariant=True` makes them the same bits: each prompt prefilled on its own, decode batches
of at most gemv.MAX_ROWS sequences (every projection a gemv, whose rows do not depend on the
others), and flash_decode's batch-invariant split count (num_splits=-1). The cost: a prefill call
a prompt, and decode attention over long caches in more CTAs than the default's at larger batches."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...gemv import MAX_ROWS as GEMV_MAX_ROWS
from .kv_cache import PagedKVCache
from .model import Llama


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 is greedy; top_k 0 and top_p 1.0 keep every token."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams: need temperature >= 0, top_k >= 0, 0 < top_p <= 1, got {self}")


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """int64 [batch] tokens from float [batch, vocab] logits."""
    if params.temperature == 0:
        return logits.argmax(-1)
    logits = logits / params.temperature
    if params.top_k:
        kth = logits.topk(min(params.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass.
        drop = probs.cumsum(-1) - probs > params.top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@dataclass
class _Sequence:
    request: int
    seq_id: int
    length: int                 # keys in the cache
    last: int                   # the token to feed next
    out: list[int] = field(default_factory=list)


class Generator:
    """Runs `model` over `cache` for batches of up to `max_batch` sequences. batch_invariant: each
    sequence's logits the same bits whatever it is batched with (the module docstring says how and
    at what cost); greedy tokens then equal those of the prompt generated alone (sampled ones not:
    the batch shares the random draws). It needs max_batch <= gemv.MAX_ROWS (8) and one rank."""

    def __init__(self, model: Llama, cache: PagedKVCache, max_batch: int = 64, cuda_graphs: bool = True,
                 batch_invariant: bool = False):
        if cache.k.shape[3] != model.num_kv_heads:
            raise ValueError(f"Generator: the cache holds {cache.k.shape[3]} kv heads and the model's rank "
                             f"{model.num_kv_heads}: build the cache with the model's tp (PagedKVCache(..., tp=model.tp))")
        if max_batch < 1:
            raise ValueError(f"Generator: max_batch must be >= 1, got {max_batch}")
        if batch_invariant and model.tp.world_size > 1:
            raise ValueError("Generator: batch_invariant is for one GPU (over several ranks the all-reduces' "
                             "paths may change with the batch; not verified)")
        if batch_invariant and max_batch > GEMV_MAX_ROWS:
            raise ValueError(f"Generator: batch_invariant needs max_batch <= {GEMV_MAX_ROWS} (decode steps of gemvs "
                             f"only; larger batches run cuBLAS, whose kernels vary with the batch), got {max_batch}")
        self.model, self.cache, self.max_batch, self.cuda_graphs = model, cache, max_batch, cuda_graphs
        self.batch_invariant = batch_invariant
        self._num_splits = -1 if batch_invariant else 0  # flash_decode's: -1 splits each sequence alike in any batch
        device = cache.k.device
        self.buckets = sorted({min(1 << i, max_batch) for i in range(max_batch.bit_length() + 1)})
        self._tokens = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._seqlens = torch.zeros(max_batch, dtype=torch.int32, device=device)
        self._table = torch.zeros(max_batch, cache.max_pages_per_seq, dtype=torch.int32, device=device)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = None
        self._next_id = 0

    def _bucket(self, n: int) -> int:
        return next(b for b in self.buckets if b >= n)

    def decode_step(self, n: int) -> torch.Tensor:
        """Logits [n, vocab] of the n sequences in the static buffers' first rows (padded rows point
        at the scratch page with length 0)."""
        b = self._bucket(n)
        args = (self._tokens[:b], self._seqlens[:b], self._table[:b], self.cache, self._num_splits)
        if not self.cuda_graphs:
            return self.model.decode(*args)[:n]
        if b not in self._graphs:
            self.model.decode(*args)  # loads kernels and builds per-shape tables before capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = self.model.decode(*args)
            self._pool = graph.pool()
            self._graphs[b] = (graph, logits)
        graph, logits = self._graphs[b]
        graph.replay()
        return logits[:n]

    def _load_batch(self, running: list[_Sequence]) -> None:
        """Static buffers from the host state of `running` (when the batch changed)."""
        n, b = len(running), self._bucket(max(len(running), 1))
        self._tokens[:b].copy_(torch.tensor([s.last for s in running] + [0] * (b - n)))
        self._seqlens[:b].copy_(torch.tensor([s.length for s in running] + [0] * (b - n), dtype=torch.int32))
        self._table[:b].copy_(self.cache.block_table_rows([s.seq_id for s in running], b))

    def _prefill(self, joining: list[_Sequence], prompts: list[list[int]]) -> torch.Tensor:
        """float32 logits [len(joining), vocab] after each prompt; one packed prefill, or with
        batch_invariant one prefill a prompt (the kernels a prompt's rows take are then those it
        takes alone)."""
        if self.batch_invariant and len(joining) > 1:
            return torch.cat([self._prefill([s], [p]) for s, p in zip(joining, prompts)])
        device = self.cache.k.device
        lengths = [len(p) for p in prompts]
        cu = torch.tensor([0] + lengths).cumsum(0)
        tokens = torch.tensor([t for p in prompts for t in p], dtype=torch.int64)
        positions = torch.cat([torch.arange(n) for n in lengths])
        slots = self.cache.slots([s.seq_id for s in joining], lengths)
        return self.model.prefill(tokens.to(device), cu.to(device, torch.int32), max(lengths), positions.to(device),
                                  slots.to(device), self.cache, logits_rows=(cu[1:] - 1).to(device))

    def generate(self, prompts: list[list[int]], max_new_tokens: int, sampling: SamplingParams = SamplingParams(),
                 stop_tokens: tuple[int, ...] | None = None, progress: bool = False) -> list[list[int]]:
        """The tokens generated for each prompt (stop token included when one ends it)."""
        cache, alloc = self.cache, self.cache.allocator
        stop = set(self.model.config.eos_token_ids if stop_tokens is None else stop_tokens)
        if max_new_tokens < 1:
            raise ValueError(f"generate: max_new_tokens must be >= 1, got {max_new_tokens}")
        for i, p in enumerate(prompts):
            need = len(p) + max_new_tokens
            if not p:
                raise ValueError(f"generate: prompt {i} is empty")
            if need > cache.max_seq_len or alloc.pages_for(need) > alloc.num_pages - 1:
                raise ValueError(f"generate: prompt {i} ({len(p)} tokens) + max_new_tokens ({max_new_tokens}) does "
                                 f"not fit the cache (max_seq_len {cache.max_seq_len}, {alloc.num_pages - 1} pages "
                                 f"of {alloc.page_size})")
        generator, tp = None, self.model.tp
        # Every rank holds the same logits; the same seed then gives every rank the same tokens.
        seed = sampling.seed
        if seed is None and sampling.temperature > 0 and tp.world_size > 1:
            seed = tp.broadcast_int(int(torch.randint(0, 2**62, ())))
        if seed is not None:
            generator = torch.Generator(device=cache.k.device).manual_seed(seed)
        bar = _progress(len(prompts) * max_new_tokens, progress and tp.rank == 0)
        outputs: list[list[int]] = [[] for _ in prompts]
        waiting = list(range(len(prompts)))
        running: list[_Sequence] = []

        def finish(s: _Sequence) -> bool:
            done = len(s.out) >= max_new_tokens or s.out[-1] in stop
            if done:
                outputs[s.request] = s.out
                alloc.free(s.seq_id)
                if bar:
                    bar.update(max_new_tokens - len(s.out))
            return done

        while waiting or running:
            joining = []
            while waiting and len(running) + len(joining) < self.max_batch and \
                    alloc.can_allocate(len(prompts[waiting[0]]) + max_new_tokens):
                r = waiting.pop(0)
                seq = _Sequence(r, self._next_id, len(prompts[r]), 0)
                self._next_id += 1
                alloc.allocate(seq.seq_id, len(prompts[r]) + max_new_tokens)
                joining.append(seq)
            changed = bool(joining)
            if joining:
                first = sample(self._prefill(joining, [prompts[s.request] for s in joining]), sampling,
                               generator).tolist()
                for s, t in zip(joining, first):
                    s.out.append(t)
                    s.last = t
                if bar:
                    bar.update(len(joining))
                running += [s for s in joining if not finish(s)]
            if not running:
                continue
            if changed:
                self._load_batch(running)
            n = len(running)
            nxt = sample(self.decode_step(n), sampling, generator)
            self._tokens[:n].copy_(nxt)
            self._seqlens[:n].add_(1)
            still = []
            for s, t in zip(running, nxt.tolist()):
                s.length += 1
                s.out.append(t)
                s.last = t
                if not finish(s):
                    still.append(s)
            if bar:
                bar.update(n)
            if len(still) != n:
                running = still
                if running:
                    self._load_batch(running)
        if bar:
            bar.close()
        return outputs


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="tok", desc="generating")
