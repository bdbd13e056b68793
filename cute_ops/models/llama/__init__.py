"""LLaMA-2/3 built from cute_ops' kernels (see model.py for which op does what).

    from cute_ops.models.llama import Generator, PagedKVCache, load_checkpoint
    model = load_checkpoint("Meta-Llama-3-8B-Instruct")
    cache = PagedKVCache.for_tokens(model.config, tokens=8 * 4096)
    out = Generator(model, cache).generate([[128000, 9906, 1917]], max_new_tokens=32)
"""
from .config import PRESETS, LlamaConfig
from .generate import Generator, SamplingParams, sample
from .kv_cache import OutOfPages, PageAllocator, PagedKVCache
from .model import Llama
from .weights import from_hf_state_dict, load_checkpoint

__all__ = ["PRESETS", "Generator", "Llama", "LlamaConfig", "OutOfPages", "PageAllocator", "PagedKVCache",
           "SamplingParams", "from_hf_state_dict", "load_checkpoint", "sample"]
