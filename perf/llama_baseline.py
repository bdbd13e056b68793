"""The end-to-end baseline of the LLaMA benchmarks: a gpt-fast-style LLaMA in plain PyTorch (a
static KV cache per layer, [batch, kv_heads, max_seq, head_dim], written at input_pos; SDPA with
a causal mask over the whole cache and grouped-query heads; RMSNorm in float32; gate and up as one
merged matmul), meant to be compiled with torch.compile(mode="reduce-overhead", fullgraph=True) as
gpt-fast does. It shares our model's weights where the layout is the same (embedding, fused QKV,
o_proj, down, norms, output) and holds gate/up merged as [gate; up]."""
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
