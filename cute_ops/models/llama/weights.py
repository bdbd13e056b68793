"""LLaMA weights from HuggingFace: a ``LlamaForCausalLM`` state dict, or a checkpoint directory
(``config.json`` + safetensors shards). The q/k/v projections are concatenated and gate/up packed
for fused_mlp once, here. Every tensor's name and shape is checked before any is copied, so a bad
checkpoint fails with the full list of problems and no half-loaded model."""
from __future__ import annotations

import json
import pathlib
from typing import Callable, Iterable

import torch

from ...gemm_pair import pack_gate_up
from .config import LlamaConfig
from .model import Llama


def hf_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a HF LLaMA checkpoint of `cfg` must hold, with its shape."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, h), "model.norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    for n in range(cfg.num_layers):
        p = f"model.layers.{n}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (cfg.q_size, h), p + "self_attn.k_proj.weight": (cfg.kv_size, h),
            p + "self_attn.v_proj.weight": (cfg.kv_size, h), p + "self_attn.o_proj.weight": (h, cfg.q_size),
            p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h), p + "mlp.down_proj.weight": (h, i)})
    return shapes


# Tensors a checkpoint may hold that the model does not use.
_IGNORED = ("rotary_emb.inv_freq",)


def check_names_and_shapes(cfg: LlamaConfig, found: dict[str, tuple[int, ...]]) -> None:
    """ValueError listing every missing, mis-shaped or unexpected tensor (a tied checkpoint may
    still carry lm_head.weight, equal to the embedding: it is accepted and ignored)."""
    want = hf_shapes(cfg)
    problems = [f"missing {n} {list(s)}" for n, s in want.items() if n not in found]
    problems += [f"{n} has shape {list(found[n])}, expected {list(s)}" for n, s in want.items()
                 if n in found and tuple(found[n]) != s]
    extra = [n for n in found if n not in want and not n.endswith(_IGNORED)
             and not (cfg.tie_word_embeddings and n == "lm_head.weight")]
    problems += [f"unexpected {n}" for n in extra]
    if problems:
        raise ValueError(f"LLaMA checkpoint does not match its config ({len(problems)} problems): "
                         + "; ".join(problems[:20]) + ("; ..." if len(problems) > 20 else ""))


def _fill(model: Llama, get: Callable[[str], torch.Tensor], names: Iterable[str],
          pending: dict[int, dict[str, torch.Tensor]]) -> None:
    """Copy HF tensors into the model as `get(name)` yields them, in the order of `names`. Gate and
    up of a layer are packed once both have been read; `pending` holds the one read first (they may
    sit in different shards)."""
    cfg = model.config
    for name in names:
        t = get(name)
        if name == "model.embed_tokens.weight":
            model.embed.copy_(t)
        elif name == "model.norm.weight":
            model.norm.copy_(t)
        elif name == "lm_head.weight":
            if model.lm_head is not None:
                model.lm_head.copy_(t)
        elif name.startswith("model.layers."):
            n, rest = name[len("model.layers."):].split(".", 1)
            layer = model.layers[int(n)]
            if rest == "input_layernorm.weight":
                layer.attn_norm.copy_(t)
            elif rest == "post_attention_layernorm.weight":
                layer.mlp_norm.copy_(t)
            elif rest == "self_attn.q_proj.weight":
                layer.wqkv[:cfg.q_size].copy_(t)
            elif rest == "self_attn.k_proj.weight":
                layer.wqkv[cfg.q_size:cfg.q_size + cfg.kv_size].copy_(t)
            elif rest == "self_attn.v_proj.weight":
                layer.wqkv[cfg.q_size + cfg.kv_size:].copy_(t)
            elif rest == "self_attn.o_proj.weight":
                layer.wo.copy_(t)
            elif rest == "mlp.down_proj.weight":
                layer.w_down.copy_(t)
            elif rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                part = pending.setdefault(int(n), {})
                part[rest.split(".")[1]] = t.to(layer.w_gate_up.device, layer.w_gate_up.dtype)
                if len(part) == 2:
                    layer.w_gate_up.copy_(pack_gate_up(part.pop("gate_proj"), part.pop("up_proj")))
                    del pending[int(n)]


@torch.inference_mode()
def from_hf_state_dict(cfg: LlamaConfig, state_dict: dict[str, torch.Tensor], dtype=torch.bfloat16,
                       device="cuda") -> Llama:
    """A model from the state dict of a HF ``LlamaForCausalLM`` (e.g. ``hf_model.state_dict()``)."""
    check_names_and_shapes(cfg, {n: tuple(t.shape) for n, t in state_dict.items()})
    model = Llama(cfg, dtype, device)
    _fill(model, state_dict.__getitem__, list(hf_shapes(cfg)), {})
    return model


def _shard_files(path: pathlib.Path) -> list[pathlib.Path]:
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [path / f for f in files]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no model.safetensors.index.json or *.safetensors files")
    return files


@torch.inference_mode()
def load_checkpoint(path: str | pathlib.Path, dtype=torch.bfloat16, device="cuda",
                    config: LlamaConfig | None = None) -> Llama:
    """A model from a HF checkpoint directory: ``config.json`` and safetensors shards, read one
    shard at a time straight into the model's tensors (never two copies of the weights). Nothing
    is downloaded."""
    from safetensors import safe_open

    path = pathlib.Path(path)
    cfg = config or LlamaConfig.from_hf(json.loads((path / "config.json").read_text()))
    files = _shard_files(path)
    found: dict[str, tuple[int, ...]] = {}
    for f in files:  # headers only: check everything before copying anything
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():
                found[name] = tuple(sf.get_slice(name).get_shape())
    check_names_and_shapes(cfg, found)
    want = hf_shapes(cfg)
    model = Llama(cfg, dtype, device)
    pending: dict[int, dict[str, torch.Tensor]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            _fill(model, sf.get_tensor, [n for n in sf.keys() if n in want], pending)
    return model
