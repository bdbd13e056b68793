"""cute_ops.models.llama: config parsing, weight mapping, checkpoint loading and the page allocator
on the CPU; on the GPU, parity with transformers' LlamaForCausalLM (prefill and 32 teacher-forced
decode steps, bf16 and fp16, tied and untied embeddings, GQA, llama3 RoPE scaling), batched
generation against each prompt alone, graph replay against eager decode, and bad inputs."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import cute_ops
from cute_ops.models.llama import (Generator, Llama, LlamaConfig, OutOfPages, PageAllocator, PagedKVCache,
                                   SamplingParams, from_hf_state_dict, load_checkpoint, sample)
from cute_ops.models.llama.parallel import TensorParallel
from cute_ops.models.llama.weights import hf_shapes
from cute_ops.rope import Llama3RopeScaling
from conftest import assert_close_to_reference

LLAMA3_8B_JSON = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
LLAMA2_7B_JSON = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "rms_norm_eps": 1e-05,
                  "max_position_embeddings": 4096, "eos_token_id": 2, "bos_token_id": 1}


def _tiny(tied=False, **kw) -> LlamaConfig:
    base = dict(vocab_size=1000, hidden_size=512, intermediate_size=1000, num_layers=3, num_heads=8, num_kv_heads=2,
                head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0, max_position=2048, tie_word_embeddings=tied,
                rope_scaling=Llama3RopeScaling(factor=8.0, original_max_position=256), eos_token_ids=(999,))
    base.update(kw)
    return LlamaConfig(**base)


def _hf_state_dict(cfg: LlamaConfig, dtype=torch.float32) -> dict[str, torch.Tensor]:
    return {n: torch.randn(s, dtype=dtype) * (0.1 if n.endswith("norm.weight") else s[-1] ** -0.5)
            + (1.0 if n.endswith("norm.weight") else 0.0) for n, s in hf_shapes(cfg).items()}


# ---------------------------------------------------------------- CPU: config, weights, pages, sampling
def test_config_from_llama3_json():
    cfg = LlamaConfig.from_hf(LLAMA3_8B_JSON)
    assert (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.num_layers) == (32, 8, 128, 32)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 8192)
    assert cfg.eos_token_ids == (128001, 128008, 128009) and not cfg.tie_word_embeddings
    assert cfg == cute_ops.models.llama.PRESETS["llama3-8b"]


def test_config_from_transformers5_rope_parameters():
    hf = {k: v for k, v in LLAMA3_8B_JSON.items() if k not in ("rope_theta", "rope_scaling")}
    hf["rope_parameters"] = {"rope_theta": 500000.0, **LLAMA3_8B_JSON["rope_scaling"]}
    assert LlamaConfig.from_hf(hf) == LlamaConfig.from_hf(LLAMA3_8B_JSON)
    plain = {**LLAMA2_7B_JSON, "rope_parameters": {"rope_type": "default", "rope_theta": 20000.0}}
    cfg = LlamaConfig.from_hf(plain)
    assert cfg.rope_theta == 20000.0 and cfg.rope_scaling is None


def test_config_from_llama2_json_defaults():
    cfg = LlamaConfig.from_hf(LLAMA2_7B_JSON)
    assert cfg.num_kv_heads == 32 and cfg.head_dim == 128 and cfg.rope_scaling is None
    assert cfg.rope_theta == 10000.0 and cfg.eos_token_ids == (2,)


@pytest.mark.parametrize("change, match", [
    ({"model_type": "mistral"}, "model_type must be 'llama'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling type 'yarn' is not supported"),
    ({"num_key_value_heads": 5}, "must be a multiple of num_kv_heads"),
    ({"attention_bias": True}, "biases are not supported"),
])
def test_config_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        LlamaConfig.from_hf({**LLAMA3_8B_JSON, **change})


def test_config_names_a_missing_key():
    bad = dict(LLAMA3_8B_JSON)
    del bad["intermediate_size"]
    with pytest.raises(ValueError, match="lacks 'intermediate_size'"):
        LlamaConfig.from_hf(bad)


@pytest.mark.parametrize("tied", [False, True])
def test_weight_mapping(tied):
    cfg = _tiny(tied)
    sd = _hf_state_dict(cfg)
    model = from_hf_state_dict(cfg, sd, dtype=torch.bfloat16, device="cpu")
    for n, layer in enumerate(model.layers):
        p = f"model.layers.{n}."
        qkv = torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"]).bfloat16()
        assert torch.equal(layer.wqkv, qkv)
        assert torch.equal(layer.w_gate_up, cute_ops.pack_gate_up(sd[p + "mlp.gate_proj.weight"],
                                                                   sd[p + "mlp.up_proj.weight"]).bfloat16())
        assert torch.equal(layer.wo, sd[p + "self_attn.o_proj.weight"].bfloat16())
        assert torch.equal(layer.attn_norm, sd[p + "input_layernorm.weight"].bfloat16())
        assert torch.equal(layer.mlp_norm, sd[p + "post_attention_layernorm.weight"].bfloat16())
    assert (model.lm_head is None) == tied
    expected_out = sd["model.embed_tokens.weight" if tied else "lm_head.weight"].bfloat16()
    assert torch.equal(model.output_weight, expected_out)


def test_weight_check_lists_every_problem():
    cfg = _tiny()
    sd = _hf_state_dict(cfg)
    del sd["model.layers.1.mlp.up_proj.weight"]
    sd["model.layers.2.self_attn.k_proj.weight"] = torch.zeros(64, 512)
    sd["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(512)
    with pytest.raises(ValueError, match=r"3 problems.*missing model.layers.1.mlp.up_proj.weight.*"
                                         r"k_proj.weight has shape \[64, 512\], expected \[128, 512\].*"
                                         r"unexpected model.layers.0.self_attn.q_proj.bias"):
        from_hf_state_dict(cfg, sd, device="cpu")


def test_unsupported_head_dim_is_rejected():
    with pytest.raises(ValueError, match="head_dim must be one of"):
        Llama(_tiny(head_dim=96, hidden_size=768), device="cpu")


def test_checkpoint_directory_in_shards(tmp_path):
    from safetensors.torch import save_file
    cfg = _tiny()
    sd = _hf_state_dict(cfg)
    names = sorted(sd)
    # gate and up of layer 1 in different shards: the loader must hold the first until the second comes.
    first = [n for n in names if not n.startswith("model.layers.1.mlp.up") and (n < "model.layers.1.z")]
    shards = {"model-00001-of-00002.safetensors": first,
              "model-00002-of-00002.safetensors": [n for n in names if n not in first]}
    assert "model.layers.1.mlp.gate_proj.weight" in first and "model.layers.1.mlp.up_proj.weight" not in first
    for f, ns in shards.items():
        save_file({n: sd[n].contiguous() for n in ns}, str(tmp_path / f))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: f for f, ns in shards.items() for n in ns}}))
    hf = {**LLAMA3_8B_JSON, "vocab_size": 1000, "hidden_size": 512, "intermediate_size": 1000, "num_hidden_layers": 3,
          "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 2048, "eos_token_id": 999,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 256}}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    loaded = load_checkpoint(tmp_path, device="cpu")
    direct = from_hf_state_dict(cfg, sd, device="cpu")
    assert loaded.config == cfg.replace(bos_token_id=128000)
    for (n, a), (_, b) in zip(loaded.named_parameters(), direct.named_parameters()):
        assert torch.equal(a, b), n


def test_bad_checkpoint_loads_nothing(tmp_path):
    from safetensors.torch import save_file
    cfg = _tiny()
    sd = _hf_state_dict(cfg)
    sd["model.norm.weight"] = torch.ones(256)
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model.norm.weight has shape \[256\], expected \[512\]"):
        load_checkpoint(tmp_path, device="cpu", config=cfg)


def test_page_allocator():
    alloc = PageAllocator(num_pages=5, page_size=16)
    assert alloc.num_free == 4  # page 0 is scratch
    a = alloc.allocate(0, 33)  # 3 pages
    assert len(a) == 3 and PageAllocator.SCRATCH_PAGE not in a
    with pytest.raises(OutOfPages, match="1 free pages of 16 tokens; 17 tokens need 2"):
        alloc.allocate(1, 17)
    assert alloc.num_free == 1  # a refused request takes nothing
    b = alloc.allocate(1, 16)
    alloc.free(0)
    assert alloc.num_free == 3 and not set(a) & set(b)
    c = alloc.allocate(2, 48)
    assert sorted(c) == sorted(a)
    with pytest.raises(ValueError, match="already holds pages"):
        alloc.allocate(2, 1)


def test_cache_slots_and_block_table():
    cfg = _tiny()
    cache = PagedKVCache(cfg, num_pages=8, page_size=16, max_seq_len=64, device="cpu")
    cache.allocator.allocate(7, 20)  # pages 1, 2
    cache.allocator.allocate(9, 5)   # page 3
    slots = cache.slots([7, 9], [20, 5])
    assert slots.tolist() == [16 + i for i in range(16)] + [32 + i for i in range(4)] + [48 + i for i in range(5)]
    table = cache.block_table_rows([9, 7], rows=3)
    assert table.tolist() == [[3, 0, 0, 0], [1, 2, 0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("dtype, d", [(torch.bfloat16, 64), (torch.float16, 128), (torch.float8_e4m3fn, 128),
                                      (torch.bfloat16, 6)])
def test_prefill_copies_kv_rows_into_their_slots(dtype, d):
    # K's rows as the prefill has them (a column slice of qkv) into random slots: as int64 words where
    # the layout allows, bytes otherwise (d = 6 bf16: 12-byte rows); every other slot untouched.
    from cute_ops.models.llama.model import _as_words, _copy_rows
    qkv = torch.randn(9, 7, d).to(dtype)
    k = qkv[:, 4:6]
    pages = torch.randn(30, 2, d).to(dtype)
    before = pages.clone()
    slots = torch.randperm(30)[:9]
    assert (_as_words(k) is None) == (d == 6)
    _copy_rows(pages, slots, k)
    if dtype != torch.float16:  # rows of another dtype than the cache's: refused, not reinterpreted
        with pytest.raises(ValueError, match="K/V rows of dtype .* for a cache of"):
            _copy_rows(pages, slots, k.to(torch.float16))
    assert torch.equal(pages[slots].view(torch.uint8), k.contiguous().view(torch.uint8))
    rest = torch.ones(30, dtype=torch.bool)
    rest[slots] = False
    assert torch.equal(pages[rest].view(torch.uint8), before[rest].view(torch.uint8))


def test_sampling():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    assert sample(logits, SamplingParams()).tolist() == [1, 0]
    assert sample(logits, SamplingParams(temperature=1.0, top_k=1)).tolist() == [1, 0]
    assert sample(logits, SamplingParams(temperature=1.0, top_p=0.01)).tolist() == [1, 0]
    gen = torch.Generator().manual_seed(3)
    picks = {sample(logits, SamplingParams(temperature=1.0, top_k=2), gen)[0].item() for _ in range(200)}
    assert picks == {1, 3}
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


# ---------------------------------------------------------------- GPU: parity with transformers
def _hf_models(cfg: LlamaConfig, sd, dtypes):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf_cfg = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps, rope_theta=cfg.rope_theta,
        max_position_embeddings=cfg.max_position, tie_word_embeddings=cfg.tie_word_embeddings,
        rope_scaling={"rope_type": "llama3", "factor": cfg.rope_scaling.factor,
                      "low_freq_factor": cfg.rope_scaling.low_freq_factor,
                      "high_freq_factor": cfg.rope_scaling.high_freq_factor,
                      "original_max_position_embeddings": cfg.rope_scaling.original_max_position},
        attn_implementation="eager")
    out = {}
    for dtype in dtypes:
        m = transformers.LlamaForCausalLM(hf_cfg).to(dtype)
        m.load_state_dict({n: t.to(dtype) for n, t in sd.items()}, strict=not cfg.tie_word_embeddings)
        out[dtype] = m.cuda().eval()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tied", [False, True])
def test_parity_with_transformers(dtype, tied):
    _check_parity_with_transformers(_tiny(tied), dtype)


@pytest.mark.gpu
def test_parity_with_transformers_through_cublas():
    # An intermediate size pack_gate_up's blocks divide: the packed prefill (138 rows, more than
    # FUSED_MLP_MAX_ROWS) takes the cuBLAS MLP, with o's and down's residual add in cuBLAS's
    # epilogue; the last rows alone take fused_mlp and an add after it.
    _check_parity_with_transformers(_tiny(intermediate_size=1024), torch.bfloat16)


@pytest.mark.gpu
def test_planted_bug_in_the_epilogue_add_fails_parity(monkeypatch):
    # The residual left out of the down projection's epilogue add on the cuBLAS route only (F.linear
    # in place of addmm_; o's add kept): the bound must catch it.
    add = Llama._add_projection

    def dropped(self, residual, x, weight):
        if weight.shape[1] == self.config.intermediate_size:  # w_down: [hidden, intermediate]
            return self.tp.all_reduce(F.linear(x, weight))
        return add(self, residual, x, weight)
    monkeypatch.setattr(Llama, "_add_projection", dropped)
    with pytest.raises(AssertionError, match="exceeds"):
        _check_parity_with_transformers(_tiny(intermediate_size=1024), torch.bfloat16)


def _check_parity_with_transformers(cfg: LlamaConfig, dtype: torch.dtype) -> None:
    """Prefill logits of three packed prompts (every row, then each last row alone) and 32
    teacher-forced decode steps against transformers' float64 run, bounded by its `dtype` run's
    error (conftest.assert_close_to_reference)."""
    sd = _hf_state_dict(cfg)
    hf = _hf_models(cfg, sd, [torch.float64, dtype])
    ours = from_hf_state_dict(cfg, sd, dtype=dtype)
    lengths, steps = [37, 100, 1], 32
    seqs = [torch.randint(0, cfg.vocab_size, (n + steps,)) for n in lengths]
    with torch.no_grad():
        ref = [hf[torch.float64](s[None].cuda()).logits[0] for s in seqs]
        low = [hf[dtype](s[None].cuda()).logits[0] for s in seqs]
    cache = PagedKVCache.for_tokens(cfg, 1024, page_size=16, dtype=dtype)
    for i, n in enumerate(lengths):
        cache.allocator.allocate(i, n + steps)
    # Prefill: every prompt row's logits.
    tokens = torch.cat([s[:n] for s, n in zip(seqs, lengths)]).cuda()
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32).cuda()
    positions = torch.cat([torch.arange(n) for n in lengths]).cuda()
    slots = cache.slots(list(range(len(lengths))), lengths).cuda()
    logits = ours.prefill(tokens, cu, max(lengths), positions, slots, cache)
    for b, n in enumerate(lengths):
        assert_close_to_reference(logits[cu[b]:cu[b + 1]], ref[b][:n], low[b][:n].float(), k=2,
                                  what=f"prefill logits of prompt {b}")
    # Each prompt's last row alone (generate's call), whose last layer runs o and the MLP on those
    # rows only; the cache gets the same K and V again.
    last = ours.prefill(tokens, cu, max(lengths), positions, slots, cache, logits_rows=cu[1:] - 1)
    assert last.shape == (len(lengths), cfg.vocab_size)
    for b, n in enumerate(lengths):
        assert_close_to_reference(last[b], ref[b][n - 1], low[b][n - 1].float(), k=2,
                                  what=f"prefill logits of prompt {b}'s last row alone")
    # Decode: 32 teacher-forced steps.
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    table = cache.block_table_rows(list(range(len(lengths)))).cuda()
    for t in range(steps):
        step_tokens = torch.stack([s[n + t] for s, n in zip(seqs, lengths)]).cuda()
        out = ours.decode(step_tokens, seqlens, table, cache)
        for b, n in enumerate(lengths):
            assert_close_to_reference(out[b], ref[b][n + t], low[b][n + t].float(), k=2,
                                      what=f"decode step {t} of sequence {b}")
        seqlens += 1


@pytest.mark.gpu
def test_planted_bug_fails_parity():
    # One key cached as its neighbour's in each layer (an off-by-one in one slot): the bound must
    # catch it. (A swap of two keys' K and V together would not be a bug: attention is permutation
    # invariant once RoPE is applied.)
    cfg = _tiny(num_layers=2)
    sd = _hf_state_dict(cfg)
    hf = _hf_models(cfg, sd, [torch.float64, torch.bfloat16])
    ours = from_hf_state_dict(cfg, sd)
    seq = torch.randint(0, cfg.vocab_size, (60,))
    with torch.no_grad():
        ref, low = hf[torch.float64](seq[None].cuda()).logits[0], hf[torch.bfloat16](seq[None].cuda()).logits[0]
    cache = PagedKVCache.for_tokens(cfg, 256, page_size=16)
    cache.allocator.allocate(0, 60)
    slots = cache.slots([0], [60]).cuda()
    ours.prefill(seq[:59].cuda(), torch.tensor([0, 59], dtype=torch.int32, device="cuda"), 59,
                 torch.arange(59, device="cuda"), slots[:59], cache)
    for layer in range(cfg.num_layers):
        k_rows = cache.k[layer].view(-1, cfg.num_kv_heads, cfg.head_dim)
        k_rows[slots[30]] = k_rows[slots[31]]

    def decode():
        return ours.decode(seq[59:60].cuda(), torch.tensor([59], dtype=torch.int32, device="cuda"),
                           cache.block_table_rows([0]).cuda(), cache)[0]

    with pytest.raises(AssertionError, match="exceeds"):
        assert_close_to_reference(decode(), ref[59], low[59].float(), k=2)


def _random_model(cfg=None, seed=0):
    return Llama.random(cfg or _tiny(), dtype=torch.bfloat16, seed=seed)


def _next_token_logits(model: Llama, contexts: list[list[int]]) -> torch.Tensor:
    """float32 [len(contexts), vocab]: the logits after each context, from one prefill of them all
    packed together (in a cache of its own)."""
    lengths = [len(c) for c in contexts]
    cache = PagedKVCache.for_tokens(model.config, sum(lengths) + 16 * len(lengths), page_size=16)
    for i, n in enumerate(lengths):
        cache.allocator.allocate(i, n)
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32).cuda()
    tokens = torch.tensor([t for c in contexts for t in c]).cuda()
    positions = torch.cat([torch.arange(n) for n in lengths]).cuda()
    slots = cache.slots(list(range(len(lengths))), lengths).cuda()
    return model.prefill(tokens, cu, max(lengths), positions, slots, cache, logits_rows=cu[1:] - 1)


def _assert_equal_up_to_near_ties(model: Llama, prompts, got, expected, ulps: int = 8) -> None:
    """Greedy continuations of `prompts` from two runs that batched them differently: equal, or where
    a pair first parts, the two tokens are a near-tie of the logits there.

    Equality alone cannot be asked: a prompt's prefill takes other kernels by the rows packed with
    it (fused_mlp's gemv route up to gemv.MAX_ROWS rows, gemm_pair above; cuBLAS picks its kernels
    by M), so its hidden states can differ in their last bits, and those turn into another token
    only where two logits tie. The tie is judged on the logits after the shared prefix, computed
    twice (the context alone, and packed with the other prompts): both tokens must lie below the
    top logit by at most `ulps` bf16 ulps of it, or 4x the two computations' largest difference,
    whichever is more (a packing bug that widened that spread is test_parity_with_transformers's to
    catch: it bounds packed prompts' logits against transformers'). A wrong token (another
    prompt's, a row mixed up) lies far below."""
    for p, (prompt, g, e) in enumerate(zip(prompts, got, expected)):
        assert len(g) == len(e), f"prompt {p}: {len(g)} tokens against {len(e)}"
        j = next((i for i, (a, b) in enumerate(zip(g, e)) if a != b), None)
        if j is None:
            continue
        context = prompt + e[:j]
        alone = _next_token_logits(model, [context])[0]
        packed = _next_token_logits(model, [q for i, q in enumerate(prompts) if i != p] + [context])[-1]
        top, spread = alone.max().item(), (alone - packed).abs().max().item()
        tol = max(ulps * 2.0 ** (math.floor(math.log2(max(abs(top), 1e-30))) - 7), 4 * spread)
        gaps = top - alone[g[j]].item(), top - alone[e[j]].item()
        assert max(gaps) <= tol, (f"prompt {p}, token {j}: {g[j]} against {e[j]}, {gaps[0]:.4g} and {gaps[1]:.4g} "
                                  f"below the top logit {top:.4g}, where a near-tie is within {tol:.3g} "
                                  f"(alone against packed: {spread:.3g})")


@pytest.mark.gpu
def test_batched_generation_equals_each_prompt_alone():
    # Up to near-ties (_assert_equal_up_to_near_ties): prompts 0 and 4 fill at most 8 rows alone,
    # so their prefills alone take the gemv route and batched gemm_pair. A continuation that parts
    # at a token that is no tie must fail the check (the planted case below).
    model = _random_model()
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in (5, 130, 17, 64, 1)]
    cache = PagedKVCache.for_tokens(model.config, 5 * 200, page_size=16, max_seq_len=200)
    batched = Generator(model, cache, max_batch=8).generate(prompts, 24, stop_tokens=())
    alone = [Generator(model, cache, max_batch=1).generate([p], 24, stop_tokens=())[0] for p in prompts]
    assert all(len(o) == 24 for o in batched)
    _assert_equal_up_to_near_ties(model, prompts, batched, alone)
    planted = [list(o) for o in alone]
    planted[2][5] = (planted[2][5] + 1) % model.config.vocab_size  # a neighbouring token id: no tie
    with pytest.raises(AssertionError, match="near-tie"):
        _assert_equal_up_to_near_ties(model, prompts, planted, alone)


def _generate_recording_logits(monkeypatch, generator: Generator, prompts, new_tokens: int):
    """(tokens, the logits every sample call saw, cloned) of generator.generate(prompts, ...)."""
    from cute_ops.models.llama import generate as generate_module

    seen, sample = [], generate_module.sample

    def recording(logits, *args):
        seen.append(logits.clone())
        return sample(logits, *args)

    monkeypatch.setattr(generate_module, "sample", recording)
    tokens = generator.generate(prompts, new_tokens, stop_tokens=())
    monkeypatch.setattr(generate_module, "sample", sample)
    return tokens, seen


@pytest.mark.gpu
def test_batch_invariant_generation_gives_each_prompt_its_alone_bits(monkeypatch):
    # batch_invariant=True: every prompt's logits, at its prefill and at each decode step, are the
    # bits of the prompt generated alone, so its greedy tokens are equal, ties or not. Five prompts
    # join at once and run to the end (no stop token), so row i of every sample call is prompt i.
    # Two planted failures show the comparison can fail: the default (a packed prefill, and split
    # counts by the batch) and the invariant mode with flash_decode's batch-dependent split count
    # put back (its decode alone: at a batch of 8 the default splits the 700-token prompt's 12 key
    # tiles 2 to a split, alone 1; the cache's 2048-key width allows 32 splits).
    model = _random_model()
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in (5, 700, 17, 64, 1)]
    cache = PagedKVCache.for_tokens(model.config, 5 * 800, page_size=16, max_seq_len=2048)
    steps = 24

    def run(invariant, splits=None):
        def generator(max_batch):
            g = Generator(model, cache, max_batch, batch_invariant=invariant)
            if splits is not None:
                g._num_splits = splits
            return g
        batched = _generate_recording_logits(monkeypatch, generator(8), prompts, steps)
        alone = [_generate_recording_logits(monkeypatch, generator(1), [p], steps) for p in prompts]
        return batched, alone

    def differences(batched, alone):
        (tokens, logits), out = batched, []
        assert len(logits) == steps and all(len(t) == steps for t in tokens)
        for i, (alone_tokens, alone_logits) in enumerate(alone):
            out += [(i, step) for step, (row, own) in enumerate(zip(logits, alone_logits))
                    if not torch.equal(row[i], own[0])]
        return out

    batched, alone = run(True)
    for i, (alone_tokens, _) in enumerate(alone):
        assert batched[0][i] == alone_tokens[0], f"prompt {i}: batched tokens are not its tokens alone"
    assert not differences(batched, alone), "(prompt, step) where the logits batched != alone"
    assert differences(*run(False)), "the default's batching changed no bit: a check of nothing"
    decode_only = run(True, splits=0)[0]
    assert differences(decode_only, alone), "flash_decode's split count by the batch changed no bit"


def test_batch_invariant_generator_refusals():
    from types import SimpleNamespace
    model, cache = SimpleNamespace(num_kv_heads=2, tp=TensorParallel()), SimpleNamespace(k=torch.empty(1, 1, 16, 2, 64))
    with pytest.raises(ValueError, match="batch_invariant needs max_batch <= 8"):
        Generator(model, cache, max_batch=9, batch_invariant=True)
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        Generator(model, cache, max_batch=0)
    model.tp = TensorParallel(0, 2)
    with pytest.raises(ValueError, match="batch_invariant is for one GPU"):
        Generator(model, cache, max_batch=4, batch_invariant=True)


@pytest.mark.gpu
@pytest.mark.parametrize("intermediate, batch", [(1000, 3), (1024, 12)], ids=["gemv_steps", "cublas_steps"])
def test_graph_decode_equals_eager_decode(intermediate, batch):
    # 12 sequences: past the gemv steps' 8 rows, the captured step runs _layers (cuBLAS, the
    # residual adds in its epilogue in place on the captured embedding's output).
    model = _random_model(_tiny(intermediate_size=intermediate))
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in ((9, 40, 3) * 4)[:batch]]
    cache = PagedKVCache.for_tokens(model.config, batch * 100, page_size=16, max_seq_len=100)
    graphs = Generator(model, cache, max_batch=16, cuda_graphs=True).generate(prompts, 20, stop_tokens=())
    eager = Generator(model, cache, max_batch=16, cuda_graphs=False).generate(prompts, 20, stop_tokens=())
    assert graphs == eager and all(len(o) == 20 for o in graphs)


def _fp8_model():
    return Llama.random(_tiny(num_heads=4, num_kv_heads=2, head_dim=128), dtype=torch.bfloat16, seed=0)


def _relative_error(got, expected):
    return ((got.double() - expected.double()).norm() / expected.double().norm()).item()


@pytest.mark.gpu
def test_fp8_cache_stores_quantized_rows_and_decodes_close():
    # The prefill attends the prompt's own K and V (the logits equal the bf16 cache's) and stores
    # them quantized, byte for byte as quantize_kv does. Decode steps over the fp8 cache stay near
    # the bf16 cache's logits (e4m3 keeps 3 mantissa bits: a few percent on this random model), and
    # a bug, values dequantized with a scale 1.5x the one they were stored with, lands much farther.
    model = _fp8_model()
    cfg = model.config
    lengths, steps = [37, 100, 1], 6
    seqs = [torch.randint(0, cfg.vocab_size, (n + steps,)) for n in lengths]
    tokens = torch.cat([s[:n] for s, n in zip(seqs, lengths)]).cuda()
    cu = torch.tensor([0] + lengths).cumsum(0).to(torch.int32).cuda()
    positions = torch.cat([torch.arange(n) for n in lengths]).cuda()
    logits, caches = {}, {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn), ("planted", torch.float8_e4m3fn)):
        cache = PagedKVCache.for_tokens(cfg, 1024, page_size=32, dtype=dtype)
        for i, n in enumerate(lengths):
            cache.allocator.allocate(i, n + steps)
        slots = cache.slots(list(range(len(lengths))), lengths).cuda()
        logits[name] = [model.prefill(tokens, cu, max(lengths), positions, slots, cache)]
        if name == "planted":
            cache.v_scale.mul_(1.5)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        table = cache.block_table_rows(list(range(len(lengths)))).cuda()
        for t in range(steps):
            step_tokens = torch.stack([s[n + t] for s, n in zip(seqs, lengths)]).cuda()
            logits[name].append(model.decode(step_tokens, seqlens, table, cache))
            seqlens += 1
        caches[name] = (cache, slots)
    torch.testing.assert_close(logits["fp8"][0], logits["bf16"][0], atol=0, rtol=0)
    (c16, slots), (c8, _) = caches["bf16"], caches["fp8"]
    for layer in range(cfg.num_layers):
        for pages8, pages16, scale in ((c8.k, c16.k, c8.k_scale), (c8.v, c16.v, c8.v_scale)):
            rows8 = pages8[layer].view(-1, cfg.num_kv_heads, 128)[slots.cpu()]
            rows16 = pages16[layer].view(-1, cfg.num_kv_heads, 128)[slots.cpu()]
            assert torch.equal(rows8.view(torch.uint8), cute_ops.quantize_kv(rows16, scale[layer]).view(torch.uint8))
    errors = [_relative_error(a, b) for a, b in zip(logits["fp8"][1:], logits["bf16"][1:])]
    planted = [_relative_error(a, b) for a, b in zip(logits["planted"][1:], logits["bf16"][1:])]
    print(f"fp8 cache: decode logits' relative error {max(errors):.4f}; planted bug {min(planted):.4f}")
    assert max(errors) < 0.1
    assert min(planted) > 3 * max(errors)


@pytest.mark.gpu
def test_fp8_cache_generation_graphs_equal_eager():
    model = _fp8_model()
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in (9, 40, 3)]
    cache = PagedKVCache.for_tokens(model.config, 3 * 100, page_size=16, max_seq_len=100,
                                    dtype=torch.float8_e4m3fn)
    graphs = Generator(model, cache, max_batch=4, cuda_graphs=True).generate(prompts, 20, stop_tokens=())
    eager = Generator(model, cache, max_batch=4, cuda_graphs=False).generate(prompts, 20, stop_tokens=())
    assert graphs == eager and all(len(o) == 20 for o in graphs)


def test_fp8_cache_rules():
    with pytest.raises(ValueError, match="fp8 cache needs head_dim 128"):
        PagedKVCache(_tiny(), 4, 16, device="meta", dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="go with an fp8 cache"):
        PagedKVCache(_tiny(), 4, 16, device="meta", k_scale=0.5)
    cfg = _tiny(num_heads=4, num_kv_heads=2, head_dim=128)
    cache = PagedKVCache(cfg, 4, 16, device="cpu", dtype=torch.float8_e4m3fn, k_scale=torch.tensor([0.5, 2.0]))
    assert cache.k_scale.shape == (cfg.num_layers, 2) and cache.k_scale[1, 1] == 2.0 and cache.v_scale.eq(1).all()
    assert cache.bytes == 2 * cache.k.numel()


@pytest.mark.gpu
def test_stop_tokens_and_continuous_batching():
    model = _random_model()
    prompts = [torch.randint(0, 1000, (n,)).tolist() for n in (12, 7, 30, 5, 9, 21)]
    cache = PagedKVCache.for_tokens(model.config, 2 * 64, page_size=16, max_seq_len=64)  # 2 sequences at a time
    free = cache.allocator.num_free
    outs = Generator(model, cache, max_batch=4).generate(prompts, 16, stop_tokens=())
    alone = [Generator(model, cache, max_batch=1).generate([p], 16, stop_tokens=())[0] for p in prompts]
    assert cache.allocator.num_free == free
    _assert_equal_up_to_near_ties(model, prompts, outs, alone)  # prompts 1 and 3: 8 rows or fewer
    # A stop token ends a sequence and is kept as its last token.
    stop = alone[0][3]
    first = alone[0][:alone[0].index(stop) + 1]
    assert Generator(model, cache).generate(prompts[:1], 16, stop_tokens=(stop,))[0] == first


@pytest.mark.gpu
def test_bad_generation_inputs():
    model = _random_model()
    cache = PagedKVCache.for_tokens(model.config, 64, page_size=16, max_seq_len=64)
    gen = Generator(model, cache)
    with pytest.raises(ValueError, match="does not fit the cache"):
        gen.generate([[1] * 60], 8)
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        gen.generate([[]], 8)
    with pytest.raises(OutOfPages):
        cache.allocator.allocate(0, 10_000)


@pytest.mark.gpu
@pytest.mark.parametrize("inter", [256, 1024])
def test_prefill_mlp_through_cublas_matches_the_unpacked_math(inter):
    # Batches of more than FUSED_MLP_MAX_ROWS rows take the cuBLAS path (Llama._add_mlp) on the packed weights, with
    # swiglu between the two matmuls: it must pair each gate column with its own up column (partial last blocks of
    # pack_gate_up: tests/test_swiglu.py).
    from cute_ops.models.llama.model import FUSED_MLP_MAX_ROWS
    cfg = _tiny(intermediate_size=inter, hidden_size=512)
    sd = _hf_state_dict(cfg, dtype=torch.float64)
    model = from_hf_state_dict(cfg, sd, dtype=torch.bfloat16, device="cuda")
    h = torch.randn(FUSED_MLP_MAX_ROWS + 1, cfg.hidden_size, dtype=torch.float64, device="cuda")
    gate, up, down = (sd[f"model.layers.0.mlp.{n}_proj.weight"].cuda() for n in ("gate", "up", "down"))

    def mlp(x, dtype):
        x, g, u, d = (t.to(dtype) for t in (x, gate, up, down))
        return F.linear(F.silu(F.linear(x, g)) * F.linear(x, u), d)

    with torch.inference_mode():
        x = h.bfloat16()
        out = model._add_mlp(torch.zeros_like(x), x, model.layers[0])  # a zero residual: the MLP alone
    assert_close_to_reference(out, mlp(h, torch.float64), mlp(h, torch.bfloat16), k=2)


@pytest.mark.gpu
def test_command_runs_a_checkpoint_directory(tmp_path, capsys):
    # A tiny HF model saved by transformers itself (config.json + safetensors), run by the command.
    from cute_ops.models.llama.__main__ import main
    cfg = _tiny()
    hf = _hf_models(cfg, _hf_state_dict(cfg), [torch.bfloat16])[torch.bfloat16]
    hf.save_pretrained(str(tmp_path))
    main(["--checkpoint", str(tmp_path), "--batch", "2", "--prompt-len", "9", "--new-tokens", "6"])
    out = capsys.readouterr().out
    assert "3 layers, hidden 512" in out and "batch 2" in out
    assert "prefill: 18 tokens" in out and "ms/step over 5 steps" in out
