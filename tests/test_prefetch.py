"""cute_ops.l2_prefetch: the input rules (CPU, Meta), and on a GPU that it changes no result and
keeps the stream's order between the kernels around it (programmatic dependent launch on Hopper):
a gemv reading the output of the kernel before the prefetch, eager and in a CUDA graph, and the
LLaMA decode step with each layer's gate/up weight prefetched (Llama.l2_prefetch_bytes) against
the same step without, logits bit for bit.
"""
from __future__ import annotations

import pytest
import torch

import cute_ops
from cute_ops._library import schemas_loaded

pytestmark = pytest.mark.skipif(not schemas_loaded(), reason="cute_ops._C is not built")


def test_checks():
    t = torch.empty(1000, 64, dtype=torch.bfloat16, device="meta")
    torch.ops.cute_ops.l2_prefetch(t, 128000)  # the whole tensor: fine
    torch.ops.cute_ops.l2_prefetch(t, 0)
    with pytest.raises(ValueError, match="t must be a CUDA tensor"):
        torch.ops.cute_ops.l2_prefetch(torch.ones(8), 16)
    with pytest.raises(ValueError, match=r"bytes must be in \[0, 128000\]"):
        torch.ops.cute_ops.l2_prefetch(t, 128016)
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.cute_ops.l2_prefetch(t, 24)
    with pytest.raises(ValueError, match="contiguous"):
        torch.ops.cute_ops.l2_prefetch(t[:, :32], 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_results_unchanged_and_order_kept():
    torch.manual_seed(0)
    w = torch.randn(4096, 1024, device="cuda").to(torch.bfloat16) * 0.03
    other = torch.randn(8192, 1024, device="cuda").to(torch.bfloat16)  # what gets prefetched
    x = torch.randn(3, 1024, device="cuda").to(torch.bfloat16)

    def step(x):
        y = cute_ops.gemv(x, w[:1024])  # the kernel before the prefetch writes y
        cute_ops.l2_prefetch(other, 5 * 2**20 + 48)
        cute_ops.l2_prefetch(other, None)  # all of it (16 MB), twice in a row
        return cute_ops.gemv(y, w)         # the kernel after it reads y

    want = cute_ops.gemv(cute_ops.gemv(x, w[:1024]), w)
    assert torch.equal(step(x), want)
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    step(static_x)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = step(static_x)
    for _ in range(3):
        static_x.copy_(torch.randn(3, 1024, device="cuda").to(torch.bfloat16))
        graph.replay()
        assert torch.equal(out, cute_ops.gemv(cute_ops.gemv(static_x, w[:1024]), w))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_llama_decode_with_prefetch_is_bit_identical():
    from cute_ops.models.llama import Generator, Llama, LlamaConfig, PagedKVCache

    cfg = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_layers=3, num_heads=8,
                      num_kv_heads=2, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0, max_position=2048,
                      tie_word_embeddings=False, eos_token_ids=(999,))
    model = Llama.random(cfg, dtype=torch.bfloat16, seed=0)
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in (9, 40, 3)]

    def run(prefetch):
        model.l2_prefetch_bytes = prefetch
        cache = PagedKVCache.for_tokens(cfg, 3 * 100, page_size=16, max_seq_len=100)
        return Generator(model, cache, max_batch=4, cuda_graphs=True).generate(prompts, 12, stop_tokens=()), cache

    try:
        assert run(0)[0] == run(1 << 20)[0]  # greedy tokens of CUDA-graph decode steps
        # One decode step's logits, eagerly, bit for bit (from the same cache each time: decode
        # appends the new keys).
        cache = PagedKVCache.for_tokens(cfg, 4 * 100, page_size=16, max_seq_len=100)
        for s in range(3):
            cache.allocator.allocate(s, 60)
        cache.k.normal_()
        cache.v.normal_()
        k0, v0 = cache.k.clone(), cache.v.clone()
        table = cache.block_table_rows([0, 1, 2], 3).cuda()
        tokens = torch.randint(0, 1000, (3,), device="cuda")
        logits = []
        for prefetch in (0, 1 << 20, 0):
            model.l2_prefetch_bytes = prefetch
            cache.k.copy_(k0)
            cache.v.copy_(v0)
            logits.append(model.decode(tokens, torch.tensor([5, 37, 59], dtype=torch.int32, device="cuda"), table,
                                       cache))
        assert torch.equal(logits[0], logits[2]) and torch.equal(logits[0], logits[1])
    finally:
        model.l2_prefetch_bytes = 0
