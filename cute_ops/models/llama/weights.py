"""LLaMA weights from HuggingFace: a ``LlamaForCausalLM`` state dict, or a checkpoint directory
(``config.json`` + safetensors shards), whole or this rank's part of it (parallel.py says which).
The q/k/v projections are concatenated and gate/up packed for fused_mlp once, here. Every tensor's name and shape is checked before any is copied, so a bad
checkpoint fails with the full list of problems and no half-loaded model."""
from __future__ import annotations

import json
import pathlib
from typing import Callable, Iterable

import torch

from ...gemm_pair import pack_gate_up
from .config import LlamaConfig
from .model import Llama
from .parallel import TensorParallel


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


# Bytes of a checkpoint tensor copied at a time (counted at 4 bytes an element, the widest
# checkpoint dtype): what a load holds in private host memory beyond the model. safetensors maps
# the files and copies out only the rows asked for; the mapped pages it touches are the page
# cache's, shared and reclaimable, not the process's own.
READ_BYTES = 64 << 20

# read(name, index) -> the part `index` (a tuple of slices) of HF tensor `name`.
Reader = Callable[[str, tuple], torch.Tensor]


def _copy_rows(dst: torch.Tensor, rows_of: Callable[[slice], torch.Tensor]) -> None:
    """dst.copy_(rows_of(all rows)), at most READ_BYTES of the source at a time."""
    if not dst.numel():
        return
    step = max(1, READ_BYTES // max(1, dst[0].numel() * 4))
    for r in range(0, dst.shape[0], step):
        rows = slice(r, min(r + step, dst.shape[0]))
        dst[rows].copy_(rows_of(rows))


def _fill(model: Llama, read: Reader, names: Iterable[str], pending: dict[int, dict[str, torch.Tensor]]) -> None:
    """Copy this rank's part of each HF tensor in `names` into the model. Gate and up of a layer
    are packed once both have been read; `pending` holds the one read first (they may sit in
    different shards)."""
    cfg, tp = model.config, model.tp

    def load(dst: torch.Tensor, name: str) -> None:
        split = tp.hf_split(cfg, name)
        if split is None:
            _copy_rows(dst, lambda rows: read(name, (rows,)))
        elif split[0] == 0:
            base = split[1].start
            _copy_rows(dst, lambda rows: read(name, (slice(base + rows.start, base + rows.stop),)))
        else:
            _copy_rows(dst, lambda rows: read(name, (rows, split[1])))

    for name in names:
        if name == "model.embed_tokens.weight":
            load(model.embed, name)
            if cfg.tie_word_embeddings and model.lm_head is not None:  # this rank's rows of it
                part = tp.vocab_part(cfg.vocab_size)
                model.lm_head[:part.stop - part.start].copy_(model.embed[part])
                model.lm_head[part.stop - part.start:].zero_()
        elif name == "model.norm.weight":
            load(model.norm, name)
        elif name == "lm_head.weight":
            if not cfg.tie_word_embeddings:  # a tied checkpoint's copy of the embedding is not read
                part = tp.vocab_part(cfg.vocab_size)
                load(model.lm_head[:part.stop - part.start], name)
                model.lm_head[part.stop - part.start:].zero_()  # the padding rows of the last rank
        elif name.startswith("model.layers."):
            n, rest = name[len("model.layers."):].split(".", 1)
            layer = model.layers[int(n)]
            q, kv = model.num_heads * cfg.head_dim, model.num_kv_heads * cfg.head_dim
            if rest == "input_layernorm.weight":
                load(layer.attn_norm, name)
            elif rest == "post_attention_layernorm.weight":
                load(layer.mlp_norm, name)
            elif rest == "self_attn.q_proj.weight":
                load(layer.wqkv[:q], name)
            elif rest == "self_attn.k_proj.weight":
                load(layer.wqkv[q:q + kv], name)
            elif rest == "self_attn.v_proj.weight":
                load(layer.wqkv[q + kv:], name)
            elif rest == "self_attn.o_proj.weight":
                load(layer.wo, name)
            elif rest == "mlp.down_proj.weight":
                load(layer.w_down, name)
            elif rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
                w = layer.w_gate_up
                part = pending.setdefault(int(n), {})
                part[rest.split(".")[1]] = t = torch.empty(w.shape[0] // 2, w.shape[1], dtype=w.dtype, device=w.device)
                load(t, name)
                if len(part) == 2:
                    w.copy_(pack_gate_up(part.pop("gate_proj"), part.pop("up_proj")))
                    del pending[int(n)]


@torch.inference_mode()
def from_hf_state_dict(cfg: LlamaConfig, state_dict: dict[str, torch.Tensor], dtype=torch.bfloat16,
                       device="cuda", tp: TensorParallel | None = None) -> Llama:
    """A model from the state dict of a HF ``LlamaForCausalLM`` (e.g. ``hf_model.state_dict()``);
    with `tp`, this rank's part of it."""
    check_names_and_shapes(cfg, {n: tuple(t.shape) for n, t in state_dict.items()})
    model = Llama(cfg, dtype, device, tp)
    _fill(model, lambda name, index: state_dict[name][index], list(hf_shapes(cfg)), {})
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
                    config: LlamaConfig | None = None, tp: TensorParallel | None = None) -> Llama:
    """A model from a HF checkpoint directory: ``config.json`` and safetensors shards, read one
    shard at a time straight into the model's tensors (never two copies of the weights), at most
    READ_BYTES at a time through the host. With `tp`, only this rank's rows and columns of each
    tensor are read. Nothing is downloaded."""
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
    model = Llama(cfg, dtype, device, tp)
    pending: dict[int, dict[str, torch.Tensor]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            _fill(model, lambda name, index: sf.get_slice(name)[index], [n for n in sf.keys() if n in want], pending)
    return model


class HostMemoryPeak:
    """The peak of this process's private resident host memory (RssAnon of /proc/self/status, Linux)
    while the block runs, sampled every `interval` seconds by a thread: ``added`` is the peak over
    the value on entry, in bytes (None where /proc is not there). File pages mapped by safetensors
    are not counted: they belong to the page cache."""

    def __init__(self, interval: float = 0.001):
        self.interval, self.start, self.peak = interval, None, None

    @staticmethod
    def _anon() -> int | None:
        try:
            with open("/proc/self/status") as f:
                return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssAnon:"))
        except (OSError, StopIteration):
            return None

    def __enter__(self) -> "HostMemoryPeak":
        import threading

        self.start = self.peak = self._anon()
        self._stop = threading.Event()

        def sample():
            while not self._stop.wait(self.interval):
                now = self._anon()
                if now is not None:
                    self.peak = max(self.peak, now)

        self._thread = threading.Thread(target=sample, daemon=True)
        if self.start is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.start is not None:
            self._thread.join()
            self.peak = max(self.peak, self._anon())

    @property
    def added(self) -> int | None:
        return None if self.start is None else self.peak - self.start
