"""LLaMA-2/3 configuration: from a HuggingFace ``config.json`` dict, or a preset of a known shape."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...rope import Llama3RopeScaling


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Llama3RopeScaling | None = None
    max_position: int = 8192
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "max_position"):
            if getattr(self, name) < 1:
                raise ValueError(f"LlamaConfig: {name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"LlamaConfig: num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads})")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, hf: dict) -> "LlamaConfig":
        """From the dict of a HuggingFace LLaMA ``config.json`` (LLaMA-2 and LLaMA-3.x: GQA,
        ``rope_theta``, the "llama3" ``rope_scaling``, ``tie_word_embeddings``)."""
        model_type = hf.get("model_type", "llama")
        if model_type != "llama":
            raise ValueError(f"LlamaConfig.from_hf: model_type must be 'llama', got {model_type!r}")
        try:
            heads = hf["num_attention_heads"]
            hidden = hf["hidden_size"]
            cfg = dict(vocab_size=hf["vocab_size"], hidden_size=hidden, intermediate_size=hf["intermediate_size"],
                       num_layers=hf["num_hidden_layers"], num_heads=heads,
                       num_kv_heads=hf.get("num_key_value_heads") or heads)
        except KeyError as e:
            raise ValueError(f"LlamaConfig.from_hf: config.json lacks {e.args[0]!r}") from None
        cfg["head_dim"] = hf.get("head_dim") or hidden // heads
        cfg["rms_norm_eps"] = hf.get("rms_norm_eps", 1e-6)
        # transformers >= 5 writes the RoPE settings as one "rope_parameters" dict (theta included);
        # earlier configs have "rope_theta" and "rope_scaling".
        rope = hf.get("rope_parameters") or {}
        cfg["rope_theta"] = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
        cfg["max_position"] = hf.get("max_position_embeddings", 4096)
        cfg["tie_word_embeddings"] = bool(hf.get("tie_word_embeddings", False))
        cfg["bos_token_id"] = hf.get("bos_token_id")
        eos = hf.get("eos_token_id")
        cfg["eos_token_ids"] = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (eos,))
        scaling = rope if rope.get("rope_type", "default") != "default" else hf.get("rope_scaling")
        if scaling:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind == "llama3":
                cfg["rope_scaling"] = Llama3RopeScaling(
                    factor=scaling["factor"], low_freq_factor=scaling["low_freq_factor"],
                    high_freq_factor=scaling["high_freq_factor"],
                    original_max_position=scaling["original_max_position_embeddings"])
            elif kind != "default":
                raise ValueError(f"LlamaConfig.from_hf: rope_scaling type {kind!r} is not supported (only 'llama3')")
        if hf.get("attention_bias") or hf.get("mlp_bias"):
            raise ValueError("LlamaConfig.from_hf: attention or MLP biases are not supported")
        return cls(**cfg)

    def replace(self, **changes) -> "LlamaConfig":
        return dataclasses.replace(self, **changes)


_LLAMA3_SCALING = Llama3RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)

# Shapes of published models (LLaMA-3.1), for benchmarks with random weights.
PRESETS = {
    "llama3-8b": LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                             num_heads=32, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                             rope_scaling=_LLAMA3_SCALING, max_position=131072, bos_token_id=128000,
                             eos_token_ids=(128001, 128008, 128009)),
    "llama3-70b": LlamaConfig(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_layers=80,
                              num_heads=64, num_kv_heads=8, head_dim=128, rms_norm_eps=1e-5, rope_theta=500000.0,
                              rope_scaling=_LLAMA3_SCALING, max_position=131072, bos_token_id=128000,
                              eos_token_ids=(128001, 128008, 128009)),
}
