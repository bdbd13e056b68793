"""LLaMA-2/3 from cute_ops' kernels: the weights of each layer and the two forward passes,
prefill (a packed batch of prompts, no padding) and decode (one token per sequence over the paged
cache). The ops carry the work:

    norm       rms_norm; the residual add before it runs in cuBLAS's epilogue (o's and down's
               addmm_ into the residual stream), or after fused_mlp where the MLP takes it
    qkv, o     F.linear over the concatenated q/k/v weights (cuBLAS), and o_proj
    prefill    rotary_embedding in place on q and k, K/V written into their pages, flash_fwd_varlen
    decode     flash_decode: RoPE of q and k_new, the append into the pages and attention, one kernel
               (the merge of split keys included)
    mlp        fused_mlp (weights packed at load) for up to 8 rows, which runs its two gemvs
               there; for more, cuBLAS's gate/up and down with swiglu (one kernel) between them
    small decode batches (up to gemv.MAX_ROWS sequences): every projection is a gemv that folds the
               norm before it and the residual add after it, so a layer is qkv, attention, o, gate/up,
               down: five launches chained by programmatic dependent launch on Hopper

Over several GPUs (tensor parallelism, parallel.py) each rank holds its heads, its slice of the
MLP and of the vocabulary; o and down are followed by an all-reduce of their partial sums (NCCL's;
or, with fold_all_reduce, folded into a gemv decode step's gemvs: gemv_push / gemv_pull), and the
logits are gathered. One rank is the same code with the collectives left out.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...decode import flash_decode, quantize_kv
from ...flash import flash_fwd_varlen
from ...gemm_pair import GATE_BLOCK, fused_mlp, swiglu
from ...gemv import MAX_ROWS as GEMV_MAX_ROWS, GemvExchange, gemv, gemv_pull, gemv_push
from ...norm import rms_norm
from ...rope import rope_cos_sin_cache, rotary_embedding
from .config import LlamaConfig
from .kv_cache import PagedKVCache
from .parallel import TensorParallel

# Head dims with kernels for both attention paths (flash_decode's set is the narrower).
SUPPORTED_HEAD_DIMS = (64, 128)
# Rows up to which the MLP runs as fused_mlp, whose gemv route is the faster there; more go
# through cuBLAS (see Llama._add_mlp).
FUSED_MLP_MAX_ROWS = GEMV_MAX_ROWS


def _as_words(t: torch.Tensor) -> torch.Tensor | None:
    """t viewed as int64 words along its last dim, or None where its layout does not allow it."""
    r = 8 // t.element_size()
    ok = t.shape[-1] % r == 0 and t.stride(-1) == 1 and t.storage_offset() % r == 0 and \
        all(s % r == 0 for s in t.stride()[:-1])
    return t.view(torch.int64) if ok else None


def _copy_rows(pages: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """pages[slots] = rows, rows of pages' own dtype, copied as int64 words where the layouts allow
    (prefill's K/V write into the pages): index_copy_ of 4096 rows of 8 x 128 bf16 took 16.5 us
    over 2-byte elements, 11.0 over words (H200, perf/tools/prefill_levers.py)."""
    if rows.dtype != pages.dtype:
        raise ValueError(f"Llama.prefill: K/V rows of dtype {rows.dtype} for a cache of {pages.dtype} (the cache's "
                         f"dtype must be the model's, or float8_e4m3fn)")
    dst, src = _as_words(pages), _as_words(rows)
    if dst is None or src is None:  # index_copy_ has no float8 kernels: an fp8 cache's rows as bytes
        dst, src = (pages.view(torch.uint8), rows.view(torch.uint8)) if pages.element_size() == 1 else (pages, rows)
    dst.index_copy_(0, slots, src)


class LlamaLayer(torch.nn.Module):
    """One layer's weights as this rank holds them: its query and kv heads' rows of q/k/v and
    columns of o, its slice of the MLP's intermediate size (all of them on one rank)."""

    def __init__(self, cfg: LlamaConfig, tp: TensorParallel, dtype: torch.dtype, device):
        super().__init__()
        kw = dict(dtype=dtype, device=device)
        h, n = cfg.hidden_size, tp.world_size
        q, kv, inter = cfg.q_size // n, cfg.kv_size // n, cfg.intermediate_size // n
        self.attn_norm = torch.nn.Parameter(torch.empty(h, **kw), requires_grad=False)
        self.wqkv = torch.nn.Parameter(torch.empty(q + 2 * kv, h, **kw), requires_grad=False)
        self.wo = torch.nn.Parameter(torch.empty(h, q, **kw), requires_grad=False)
        self.mlp_norm = torch.nn.Parameter(torch.empty(h, **kw), requires_grad=False)
        # pack_gate_up(gate, up): the layout fused_mlp's SwiGLU epilogue reads.
        self.w_gate_up = torch.nn.Parameter(torch.empty(2 * inter, h, **kw), requires_grad=False)
        self.w_down = torch.nn.Parameter(torch.empty(h, inter, **kw), requires_grad=False)


class Llama(torch.nn.Module):
    """A LLaMA model for inference. Build it with :func:`~cute_ops.models.llama.weights.from_hf` /
    ``load_checkpoint`` or :meth:`random`; run it with :class:`~cute_ops.models.llama.generate.Generator`
    or the two passes below. With `tp` of several ranks, this process's part of the model (see
    parallel.py); every rank runs the same calls in the same order."""

    # Parameters each rank holds a part of (every other one is whole on every rank).
    SHARDED = ("wqkv", "wo", "w_gate_up", "w_down", "lm_head")
    # Over several ranks, True folds a gemv decode step's all-reduces into its gemvs (GemvExchange);
    # False (the default: faster as measured, docs/perf-notes.md) calls NCCL's all-reduce between
    # plain gemvs.
    fold_all_reduce = False

    def __init__(self, config: LlamaConfig, dtype: torch.dtype = torch.bfloat16, device="cuda",
                 tp: TensorParallel | None = None):
        super().__init__()
        tp = tp or TensorParallel()
        tp.check(config)
        if config.head_dim not in SUPPORTED_HEAD_DIMS:
            raise ValueError(f"Llama: head_dim must be one of {SUPPORTED_HEAD_DIMS} (the decode kernel's), "
                             f"got {config.head_dim}")
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"Llama: dtype must be torch.float16 or torch.bfloat16, got {dtype}")
        self.config, self.dtype, self.tp = config, dtype, tp
        # This rank's heads (all of them on one rank).
        self.num_heads, self.num_kv_heads = config.num_heads // tp.world_size, config.num_kv_heads // tp.world_size
        kw = dict(dtype=dtype, device=device)
        self.embed = torch.nn.Parameter(torch.empty(config.vocab_size, config.hidden_size, **kw), requires_grad=False)
        self.layers = torch.nn.ModuleList(LlamaLayer(config, tp, dtype, device) for _ in range(config.num_layers))
        self.norm = torch.nn.Parameter(torch.empty(config.hidden_size, **kw), requires_grad=False)
        # Tied embeddings on one rank project through the embedding itself; over several ranks each
        # holds its vocabulary rows of it here.
        self.lm_head = None if config.tie_word_embeddings and tp.world_size == 1 else torch.nn.Parameter(
            torch.empty(tp.vocab_rows(config.vocab_size), config.hidden_size, **kw), requires_grad=False)
        # RoPE tables: [positions, rot_dim] (cos | sin) for rotary_embedding, and its two halves,
        # contiguous, for flash_decode. float32: the angles exact to float32 at any position.
        cos_sin = rope_cos_sin_cache(config.head_dim, config.max_position, config.rope_theta, config.rope_scaling,
                                     device=device)
        half = config.head_dim // 2
        self.register_buffer("cos_sin", cos_sin, persistent=False)
        self.register_buffer("rope_cos", cos_sin[:, :half].contiguous(), persistent=False)
        self.register_buffer("rope_sin", cos_sin[:, half:].contiguous(), persistent=False)
        self._exchange: GemvExchange | None = None  # built by the first gemv decode step over several ranks

    @classmethod
    def random(cls, config: LlamaConfig, dtype=torch.bfloat16, device="cuda", seed: int = 0,
               tp: TensorParallel | None = None) -> "Llama":
        """Random weights with a LLaMA-like scale (for benchmarks and tests): the activations stay
        O(1). Over several ranks each draws its own parts directly (no rank makes the whole model),
        the same replicated weights on every rank; such a model is not the one-rank model of the
        same seed."""
        model = cls(config, dtype, device, tp)
        tp = model.tp
        shared = torch.Generator(device=device).manual_seed(seed)
        own = shared if tp.world_size == 1 else torch.Generator(device=device).manual_seed(seed + 7919 * (tp.rank + 1))
        for name, p in model.named_parameters():
            sharded = name.rsplit(".", 1)[-1] in cls.SHARDED
            gen = own if sharded else shared
            # The scale of the whole weight: row-parallel parts hold 1/N of its input columns.
            fan_in = p.shape[-1] * (tp.world_size if name.endswith(("wo", "w_down")) else 1)
            if name.endswith("norm"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen, device=device))
            else:
                p.copy_(torch.randn(p.shape, generator=gen, device=device) * fan_in ** -0.5)
        if model.lm_head is not None:
            part = tp.vocab_part(config.vocab_size)
            if config.tie_word_embeddings:
                model.lm_head[:part.stop - part.start].copy_(model.embed[part])
            model.lm_head[part.stop - part.start:].zero_()  # the padding rows of the last rank
        return model

    @property
    def output_weight(self) -> torch.Tensor:
        return self.embed if self.lm_head is None else self.lm_head

    @property
    def weight_bytes(self) -> int:
        """Bytes a decode step reads of this rank's weights: every layer and the output projection
        (the final norm and the embedding rows of a step's tokens are negligible)."""
        return sum(p.numel() * p.element_size() for p in self.layers.parameters()) + \
            self.output_weight.numel() * self.output_weight.element_size()

    def _split_qkv(self, qkv: torch.Tensor, lead: tuple[int, ...]):
        d = self.config.head_dim
        q_size, kv_size = self.num_heads * d, self.num_kv_heads * d
        q = qkv[..., :q_size].view(*lead, self.num_heads, d)
        k = qkv[..., q_size:q_size + kv_size].view(*lead, self.num_kv_heads, d)
        v = qkv[..., q_size + kv_size:].view(*lead, self.num_kv_heads, d)
        return q, k, v

    @staticmethod
    def _mlp_is_fused(h: torch.Tensor, layer: LlamaLayer) -> bool:
        """Whether h's MLP runs as fused_mlp (see _add_mlp), not through cuBLAS."""
        return h.shape[0] <= FUSED_MLP_MAX_ROWS or layer.w_down.shape[1] % GATE_BLOCK != 0

    def _layers(self, x: torch.Tensor, attention, keep_rows: torch.Tensor | None = None) -> torch.Tensor:
        """The decoder stack over hidden states x [tokens, hidden]; attention(i, q, k, v) -> [tokens,
        heads, head_dim]. Returns the final norm's output, of the rows `keep_rows` only when given:
        the last layer then runs its o projection and MLP on those rows alone (every row's K and V
        are still made and cached; past the last attention a row feeds only its own logits)."""
        residual, eps, last = x, self.config.rms_norm_eps, len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            # The residual stream: x (the embedding's output, this pass's own), updated in place on
            # rank 0; the other ranks take the all-reduce's output.
            h = rms_norm(residual, layer.attn_norm, eps)
            q, k, v = self._split_qkv(F.linear(h, layer.wqkv), h.shape[:-1])
            out = attention(i, q, k, v).flatten(-2)
            if keep_rows is not None and i == last:
                out, residual = out[keep_rows], residual[keep_rows]
            residual = self._add_projection(residual, out, layer.wo)
            residual = self._add_mlp(residual, rms_norm(residual, layer.mlp_norm, eps), layer)
        return rms_norm(residual, self.norm, eps)

    def _add_projection(self, residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """residual + x @ weight.T, summed over the ranks: the add in rank 0's cuBLAS epilogue (in
        place), the other ranks' partial sums all-reduced into it. Returns the residual stream."""
        return self.tp.all_reduce(residual.addmm_(x, weight.t()) if self.tp.rank == 0 else F.linear(x, weight))

    def _add_mlp(self, residual: torch.Tensor, h: torch.Tensor, layer: LlamaLayer) -> torch.Tensor:
        """residual + MLP(h) over the ranks. fused_mlp where it is the faster (the smallest
        batches, whose time is the weights' read; it runs two gemvs there), its output added after
        it; above FUSED_MLP_MAX_ROWS rows the gate/up and down matmuls through cuBLAS, on the same
        packed weights, with swiglu between them (one kernel over pack_gate_up's column order) and
        the residual added in down's epilogue. An intermediate size that is not a multiple of
        pack_gate_up's block stays on fused_mlp: the small test models have one (1000). A prompt's
        prefill rows still depend on what is packed with it (fused_mlp runs gemvs up to
        gemv.MAX_ROWS rows and gemm_pair above; cuBLAS picks its kernels by M), so a prompt's
        greedy tokens batched and alone agree up to near-ties of the logits (test_llama;
        Generator's batch_invariant prefills one prompt at a time instead).
        Measured against fused_mlp on an H200 (`ours_cublas_swiglu` in perf/cases_gemm_pair.py;
        docs/perf-notes.md, session 59): the cuBLAS route is faster at M = 16-32 and from 256 (up
        to 15%; 3.6% at a 4096-token prefill), fused_mlp 4-5% faster at M = 64-128 (not
        switched)."""
        if self._mlp_is_fused(h, layer):
            out = fused_mlp(h, layer.w_gate_up, layer.w_down)
            return self.tp.all_reduce(residual.add_(out) if self.tp.rank == 0 else out)
        return self._add_projection(residual, swiglu(F.linear(h, layer.w_gate_up)), layer.w_down)

    def _gemv_layers(self, x: torch.Tensor, attention) -> torch.Tensor:
        """The decoder stack and the output projection for a batch of at most GEMV_MAX_ROWS tokens:
        the same math as _layers + lm_head, each norm folded into the projection after it and each
        residual add into the one before it (over several ranks, into rank 0's partial sum, which
        the all-reduce then adds to the others'). Returns this rank's logits in the model's dtype."""
        residual, eps, tp = x, self.config.rms_norm_eps, self.tp
        first = tp.rank == 0
        if tp.world_size > 1 and self.fold_all_reduce and x.is_cuda:
            return self._gemv_layers_exchanged(x, attention)
        for i, layer in enumerate(self.layers):
            qkv = gemv(residual, layer.wqkv, layer.attn_norm, eps)
            q, k, v = self._split_qkv(qkv, qkv.shape[:-1])
            residual = self._row_parallel_gemv(attention(i, q, k, v).flatten(-2), layer.wo,
                                               residual if first else None)
            act = gemv(residual, layer.w_gate_up, layer.mlp_norm, eps, activation="swiglu")
            residual = self._row_parallel_gemv(act, layer.w_down, residual if first else None)
        return gemv(residual, self.output_weight, self.norm, eps)

    def _row_parallel_gemv(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        """A gemv decode step's o or down projection and its all-reduce: the two calls, or one
        pushed gemv where TensorParallel.pushes says so (kind "pushed", or "auto" at one row)."""
        if self.tp.pushes(x, weight):
            return self.tp.pushed_gemv(x, weight, residual)
        return self.tp.all_reduce(gemv(x, weight, residual=residual))

    def _gemv_layers_exchanged(self, x: torch.Tensor, attention) -> torch.Tensor:
        """_gemv_layers over several ranks with each all-reduce folded into the gemvs around it: o
        and down push their partial sums (rank 0's with the residual added) into slot 2i / 2i + 1 of
        the exchange, and gate/up, the next layer's qkv and the output projection pull the sum as
        their input; rank 0 keeps the sum (the residual stream) for its next push."""
        if self._exchange is None:  # a collective: every rank makes its first such step together
            self._exchange = GemvExchange(x, 2 * len(self.layers), self.config.hidden_size, self.tp.group)
        ex, eps, m = self._exchange, self.config.rms_norm_eps, x.shape[0]
        first = self.tp.rank == 0

        def pull(slot, weight, norm_weight, activation="none"):
            """(the gemv over the slot's sum, that sum on rank 0)"""
            kept = torch.empty_like(x) if first else None
            return gemv_pull(ex, slot, m, weight, norm_weight, eps, activation, kept), kept

        residual = x
        for i, layer in enumerate(self.layers):
            if i == 0:
                qkv = gemv(x, layer.wqkv, layer.attn_norm, eps)
            else:
                qkv, residual = pull(2 * i - 1, layer.wqkv, layer.attn_norm)
            q, k, v = self._split_qkv(qkv, qkv.shape[:-1])
            gemv_push(attention(i, q, k, v).flatten(-2), layer.wo, ex, 2 * i, residual if first else None)
            act, residual = pull(2 * i, layer.w_gate_up, layer.mlp_norm, "swiglu")
            gemv_push(act, layer.w_down, ex, 2 * i + 1, residual if first else None)
        return pull(2 * len(self.layers) - 1, self.output_weight, self.norm)[0]

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int, positions: torch.Tensor,
                slots: torch.Tensor, cache: PagedKVCache, logits_rows: torch.Tensor | None = None) -> torch.Tensor:
        """Prompts packed along one dim, each starting at position 0: their K and V go into the cache
        at `slots`, and the logits of `logits_rows` (default: every row) are returned, float32
        (the whole vocabulary, on every rank). Rows left out of `logits_rows` skip the last layer's
        o projection and MLP (a 4096-token prefill of LLaMA-3-8B asking for 8 rows: 3% of its
        matmul work).

        tokens: int64 [total]; cu_seqlens: int32 [batch + 1]; max_seqlen: the longest prompt;
        positions: int32/int64 [total] (0 .. len - 1 per prompt); slots: int64 [total] cache rows
        (page * page_size + row, from PagedKVCache.slots)."""
        def attention(i, q, k, v):
            rotary_embedding(q, k, positions, self.cos_sin)
            k_pages = cache.k[i].view(-1, *k.shape[1:])
            v_pages = cache.v[i].view(-1, *v.shape[1:])
            # Stored quantized in an fp8 cache, as flash_decode's append does; attended as they are.
            k_rows, v_rows = (k, v) if not cache.fp8 else \
                (quantize_kv(k, cache.k_scale[i]), quantize_kv(v, cache.v_scale[i]))
            _copy_rows(k_pages, slots, k_rows)
            _copy_rows(v_pages, slots, v_rows)
            return flash_fwd_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True)[0]

        h = self._layers(F.embedding(tokens, self.embed), attention, keep_rows=logits_rows)
        return self.tp.gather_vocab(F.linear(h, self.output_weight), self.config.vocab_size).float()

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, cache_seqlens: torch.Tensor, block_table: torch.Tensor,
               cache: PagedKVCache, num_splits: int = 0) -> torch.Tensor:
        """One token per sequence: tokens int64 [batch] at positions cache_seqlens (int32 [batch], the
        keys already cached), block_table int32 [batch, pages]. Appends each token's K and V to the
        cache and returns float32 logits [batch, vocab] (on every rank); the caller advances
        cache_seqlens. num_splits: flash_decode's (0 its pick for the batch, -1 the same split of
        each sequence in any batch: Generator's batch_invariant)."""
        b = tokens.shape[0]

        def attention(i, q, k, v):
            scales = dict(k_scale=cache.k_scale[i], v_scale=cache.v_scale[i]) if cache.fp8 else {}
            out, _ = flash_decode(q.unsqueeze(1), cache.k[i], cache.v[i], cache_seqlens, k.unsqueeze(1),
                                  v.unsqueeze(1), block_table, self.rope_cos, self.rope_sin, num_splits=num_splits,
                                  **scales)
            return out.view(b, *q.shape[1:])

        x = F.embedding(tokens, self.embed)
        logits = self._gemv_layers(x, attention) if b <= GEMV_MAX_ROWS else \
            F.linear(self._layers(x, attention), self.output_weight)
        return self.tp.gather_vocab(logits, self.config.vocab_size).float()
