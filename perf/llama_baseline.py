"""The end-to-end baseline of the LLaMA benchmarks: a gpt-fast-style LLaMA in plain PyTorch (a
static KV cache per layer, [batch, kv_heads, max_seq, head_dim], written at input_pos; SDPA with
a causal mask over the whole cache and grouped-query heads; RMSNorm in float32; gate and up as one
merged matmul), meant to be compiled with torch.compile(mode="reduce-overhead", fullgraph=True) as
gpt-fast does. It shares our model's weights where the layout is the same (embedding, fused QKV,
o_proj, down, norms, output) and holds gate/up merged as [gate; up].

`hf_eager_llama` is the other baseline: transformers' own LlamaForCausalLM, eager attention, run
eagerly over a StaticCache, on the same weights (views, no copies)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_ops


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (HF's layout) in float32; x [B, S, H, D], cos/sin [S, D/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = cos[None, :, None], sin[None, :, None]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).type_as(x)


class _KVCache(torch.nn.Module):
    def __init__(self, batch, heads, max_seq, head_dim, dtype, device):
        super().__init__()
        shape = (batch, heads, max_seq, head_dim)
        self.register_buffer("k_cache", torch.randn(shape, device=device).to(dtype))
        self.register_buffer("v_cache", torch.randn(shape, device=device).to(dtype))

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        k_out, v_out = self.k_cache, self.v_cache
        k_out[:, :, input_pos] = k
        v_out[:, :, input_pos] = v
        return k_out, v_out


class GptFastLlama(torch.nn.Module):
    def __init__(self, ours, batch: int, max_seq: int):
        super().__init__()
        cfg = self.cfg = ours.config
        self.embed, self.norm, self.output = ours.embed, ours.norm, ours.output_weight
        self.layers = []
        for layer in ours.layers:
            gate, up = cute_ops.unpack_gate_up(layer.w_gate_up)
            self.layers.append((layer.attn_norm, layer.wqkv, layer.wo, layer.mlp_norm, torch.cat([gate, up]),
                                layer.w_down))
        # One cache module per layer, written with an index_put on the whole buffer, as gpt-fast
        # does: Inductor then updates it in place. (One [layers, ...] buffer written through a
        # per-layer view is copied back whole on every call under reduce-overhead.)
        self.kv = torch.nn.ModuleList(_KVCache(batch, cfg.num_kv_heads, max_seq, cfg.head_dim, ours.dtype,
                                               ours.embed.device) for _ in range(cfg.num_layers))
        device = ours.embed.device
        self.register_buffer("cos", ours.rope_cos[:max_seq].clone())
        self.register_buffer("sin", ours.rope_sin[:max_seq].clone())
        self.register_buffer("causal", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool, device=device)))

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Logits [B, S, vocab] of tokens idx [B, S] at positions input_pos [S]; writes their K/V."""
        c = self.cfg
        b, s = idx.shape
        x = F.embedding(idx, self.embed)
        mask = self.causal[None, None, input_pos]
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        for i, (attn_norm, wqkv, wo, mlp_norm, w13, w2) in enumerate(self.layers):
            h = _rms_norm(x, attn_norm, c.rms_norm_eps)
            q, k, v = F.linear(h, wqkv).split([c.q_size, c.kv_size, c.kv_size], dim=-1)
            q = _rope(q.view(b, s, c.num_heads, c.head_dim), cos, sin).transpose(1, 2)
            k = _rope(k.view(b, s, c.num_kv_heads, c.head_dim), cos, sin).transpose(1, 2)
            v = v.view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
            k, v = self.kv[i].update(input_pos, k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            x = x + F.linear(y.transpose(1, 2).reshape(b, s, c.q_size), wo)
            gate, up = F.linear(_rms_norm(x, mlp_norm, c.rms_norm_eps), w13).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w2)
        return F.linear(_rms_norm(x, self.norm, c.rms_norm_eps), self.output).float()


def hf_eager_llama(ours, baseline: GptFastLlama):
    """transformers' LlamaForCausalLM (attn_implementation="eager") on `ours`'s weights: built on
    the meta device, then given views (q, k and v as row blocks of the fused QKV; gate and up as
    the halves of the gpt-fast baseline's merged copy), so that it allocates no weights of its own."""
    import transformers

    c = ours.config
    rope = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling is not None:
        rope = {"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": c.rope_scaling.factor,
                "low_freq_factor": c.rope_scaling.low_freq_factor,
                "high_freq_factor": c.rope_scaling.high_freq_factor,
                "original_max_position_embeddings": c.rope_scaling.original_max_position}
    hf_cfg = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps, max_position_embeddings=c.max_position,
        tie_word_embeddings=False, rope_parameters=rope, attn_implementation="eager", dtype=ours.dtype)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(hf_cfg)
    sd = {"model.embed_tokens.weight": ours.embed, "model.norm.weight": ours.norm,
          "lm_head.weight": ours.output_weight}
    for i, (layer, merged) in enumerate(zip(ours.layers, baseline.layers)):
        p = f"model.layers.{i}."
        q, k, v = layer.wqkv.split([c.q_size, c.kv_size, c.kv_size])
        gate, up = merged[4].chunk(2)
        sd.update({p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k,
                   p + "self_attn.v_proj.weight": v, p + "self_attn.o_proj.weight": layer.wo,
                   p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                   p + "mlp.down_proj.weight": layer.w_down, p + "input_layernorm.weight": layer.attn_norm,
                   p + "post_attention_layernorm.weight": layer.mlp_norm})
    # Detached views: load_state_dict(assign=True) would otherwise switch on requires_grad of the
    # tensors given that are Parameters already (ours are), and with it autograd in the other models.
    model.load_state_dict({name: t.detach() for name, t in sd.items()}, strict=True, assign=True)
    model.requires_grad_(False)
    # Non-persistent buffers (the RoPE frequencies) are not in a state dict: made again on the GPU.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=hf_cfg).to(ours.embed.device)
    return model.eval()


def hf_static_cache(model, batch: int, max_seq: int):
    """A transformers StaticCache of `max_seq` positions for `batch` sequences, its layers allocated
    now and filled with random values, as the other caches of a benchmark."""
    import transformers

    cfg = model.config
    cache = transformers.StaticCache(config=cfg, max_cache_len=max_seq)
    weight = model.lm_head.weight
    cache.early_initialization(batch, cfg.num_key_value_heads, cfg.head_dim, weight.dtype, weight.device)
    for layer in cache.layers:
        layer.keys.normal_()
        layer.values.normal_()
    return cache
