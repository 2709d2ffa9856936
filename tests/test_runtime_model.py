"""Runtime decoder, KV cache and weight loading: parity with transformers' own implementation on
tiny random models (llama tied/untied, llama3 RoPE, qwen2 bias, qwen3 q/k norm), both full
forward and incremental decoding with ragged rows, padding and rollback."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hypothesis import given, settings, strategies as st  # noqa: E402

from psdlab.runtime import weights  # noqa: E402
from psdlab.runtime.model_config import ModelConfig  # noqa: E402
from psdlab.runtime.kv_cache import KVCache  # noqa: E402
from psdlab.runtime.weights import convert_gguf, load_model, random_model_dir  # noqa: E402

pytestmark = pytest.mark.runtime
TOL = 1e-4
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
VARIANTS = {
    "llama-untied": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True, "num_key_value_heads": 1}),
    "llama3-rope": ("llama", {"rope_parameters": LLAMA3_ROPE, "num_key_value_heads": 4}),
    "qwen2-bias": ("qwen2", {}),
    "qwen3-qknorm": ("qwen3", {"head_dim": 24}),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    """(our model, cfg, transformers model) on the same random weights."""
    model_type, overrides = VARIANTS[request.param]
    path = random_model_dir(tmp_path_factory.mktemp(request.param), overrides, seed=3,
                            model_type=model_type)
    ours, cfg = load_model(path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    return ours, cfg, hf.eval()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = random_model_dir(tmp_path_factory.mktemp("llama"), {}, seed=5)
    ours, cfg = load_model(path)
    return ours, cfg, path


def hf_logits(hf, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(tokens).logits


def test_config_flags_follow_model_type(pair):
    ours, cfg, hf = pair
    assert cfg.qk_norm == (hf.config.model_type == "qwen3")
    assert cfg.attention_bias == (hf.config.model_type == "qwen2")
    assert (ours.lm_head.weight is ours.embed_tokens.weight) == cfg.tie_word_embeddings


def test_full_forward_matches_transformers(pair):
    ours, cfg, hf = pair
    tokens = torch.randint(0, cfg.vocab_size, (3, 37), generator=torch.Generator().manual_seed(0))
    diff = (ours.forward_no_cache(tokens) - hf_logits(hf, tokens)).abs().max().item()
    assert diff <= TOL


def _feed(ours, cache, slots, seqs, start, gen, vocab):
    """Append seqs[b, start[b]:] to the cache in random ragged padded chunks; return the
    logits per (row, position)."""
    b, n = seqs.shape
    cur = list(start)
    out = {}
    while min(cur) < n:
        num_new = [min(int(torch.randint(0, 5, (1,), generator=gen)), n - p) for p in cur]
        width = max(max(num_new), 1)
        chunk = torch.randint(-3, vocab + 3, (b, width), generator=gen)  # garbage padding
        for r in range(b):
            chunk[r, :num_new[r]] = seqs[r, cur[r]:cur[r] + num_new[r]]
        logits = ours(chunk, cache, slots, torch.tensor(num_new))
        assert logits.shape == (b, width, vocab)
        for r in range(b):
            for t in range(num_new[r]):
                out[(r, cur[r] + t)] = logits[r, t]
        cur = [p + k for p, k in zip(cur, num_new)]
        assert cache.lengths[slots].tolist() == cur
    return out


def _max_diff(got: dict, ref: torch.Tensor) -> float:
    return max((v - ref[r, p]).abs().max().item() for (r, p), v in got.items())


def test_incremental_ragged_padding_and_rollback(pair):
    ours, cfg, hf = pair
    gen = torch.Generator().manual_seed(1)
    n = 30
    seqs = torch.randint(0, cfg.vocab_size, (3, n), generator=gen)
    ref = hf_logits(hf, seqs)
    cache = KVCache(cfg, max_slots=5, max_len=n + 2)
    slots = torch.tensor([3, 0, 4])                     # non-contiguous, unordered
    first = _feed(ours, cache, slots, seqs, [0, 0, 0], gen, cfg.vocab_size)
    assert len(first) == 3 * n and _max_diff(first, ref) <= TOL

    # Rollback then re-append the same tokens: the same logits as the first time.
    back = [7, 1, 19]
    cache.truncate(slots, torch.tensor(back))
    again = _feed(ours, cache, slots, seqs, back, gen, cfg.vocab_size)
    assert max((v - first[key]).abs().max().item() for key, v in again.items()) <= 1e-5

    # Rollback then append *different* tokens: stale cache entries must not leak.
    cache.truncate(slots, torch.tensor(back))
    alt = seqs.clone()
    for r, cut in enumerate(back):
        alt[r, cut:] = torch.randint(0, cfg.vocab_size, (n - cut,), generator=gen)
    fresh = _feed(ours, cache, slots, alt, back, gen, cfg.vocab_size)
    assert _max_diff(fresh, hf_logits(hf, alt)) <= TOL


def test_other_slots_are_untouched(llama):
    ours, cfg, _ = llama
    gen = torch.Generator().manual_seed(2)
    cache = KVCache(cfg, max_slots=3, max_len=16)
    a = torch.randint(0, cfg.vocab_size, (1, 6), generator=gen)
    ours(a, cache, torch.tensor([1]))
    k_before = [t[1].clone() for t in cache.k]
    ours(torch.randint(0, cfg.vocab_size, (2, 9), generator=gen), cache, torch.tensor([0, 2]))
    assert cache.lengths.tolist() == [9, 6, 9]
    assert all(torch.equal(t[1, :, :6], kb[:, :6]) for t, kb in zip(cache.k, k_before))


def test_only_last_returns_last_valid_position(llama):
    ours, cfg, _ = llama
    gen = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, cfg.vocab_size, (3, 8), generator=gen)
    num_new = torch.tensor([8, 3, 5])
    full = ours(tokens, KVCache(cfg, 3, 8), torch.arange(3), num_new)
    last = ours(tokens, KVCache(cfg, 3, 8), torch.arange(3), num_new, only_last=True)
    assert last.shape == (3, 1, cfg.vocab_size)
    for r, k in enumerate(num_new.tolist()):
        assert torch.allclose(last[r, 0], full[r, k - 1], atol=1e-5)


@settings(deadline=None, max_examples=12)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 4), n=st.integers(1, 20))
def test_any_chunking_equals_full_forward(llama, seed, rows, n):
    ours, cfg, _ = llama
    gen = torch.Generator().manual_seed(seed)
    seqs = torch.randint(0, cfg.vocab_size, (rows, n), generator=gen)
    cache = KVCache(cfg, max_slots=rows, max_len=n)
    got = _feed(ours, cache, torch.randperm(rows, generator=gen), seqs, [0] * rows, gen,
                cfg.vocab_size)
    assert _max_diff(got, ours.forward_no_cache(seqs)) <= TOL


def test_overflowing_max_len_is_a_clear_error_and_changes_nothing(llama):
    ours, cfg, _ = llama
    cache = KVCache(cfg, max_slots=2, max_len=8)
    ours(torch.zeros(2, 6, dtype=torch.long), cache, torch.tensor([0, 1]), torch.tensor([6, 2]))
    with pytest.raises(ValueError, match="max_len") as err:
        ours(torch.zeros(2, 3, dtype=torch.long), cache, torch.tensor([0, 1]))
    assert "\n" not in str(err.value)
    assert cache.lengths.tolist() == [6, 2]


def test_cache_truncate_and_reset_validate(llama):
    ours, cfg, _ = llama
    cache = KVCache(cfg, max_slots=3, max_len=8)
    ours(torch.zeros(3, 5, dtype=torch.long), cache, torch.tensor([0, 1, 2]),
         torch.tensor([5, 4, 3]))
    with pytest.raises(ValueError, match="new_lengths"):
        cache.truncate([0, 1], [6, 1])                  # cannot grow by truncating
    cache.truncate([0, 1], [2, 1])
    assert cache.lengths.tolist() == [2, 1, 3]
    cache.reset([2])
    assert cache.lengths.tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="slots"):
        cache.reset([3])
    with pytest.raises(ValueError, match="max_len"):
        KVCache(cfg, max_slots=1, max_len=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_close_to_fp32(llama, dtype):
    ours, cfg, path = llama
    dt = getattr(torch, dtype)
    low, _ = load_model(path, dtype=dt)
    tokens = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(6))
    got = low(tokens, KVCache(cfg, 2, 12, dtype=dt), torch.arange(2))
    assert got.dtype == dt
    assert (got.float() - ours.forward_no_cache(tokens)).abs().max().item() < 0.1


def test_sharded_checkpoint_loads_same_weights(tmp_path, llama):
    ours, cfg, _ = llama
    path = random_model_dir(tmp_path / "sharded", {}, seed=5, max_shard_size="40KB")
    assert (path / "model.safetensors.index.json").is_file()
    assert len(list(path.glob("*.safetensors"))) > 1
    sharded, _ = load_model(path)
    tokens = torch.arange(20)[None] % cfg.vocab_size
    assert torch.equal(sharded.forward_no_cache(tokens), ours.forward_no_cache(tokens))


@pytest.mark.parametrize("change, field", [
    ({"model_type": "mistral"}, "model_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"num_key_value_heads": 3}, "num_kv_heads"),
])
def test_unsupported_configs_are_rejected_in_one_line(llama, change, field):
    *_, path = llama
    config = {**json.loads((path / "config.json").read_text()), **change}
    with pytest.raises(ValueError, match=field) as err:
        ModelConfig.from_hf(config)
    assert "\n" not in str(err.value)


def test_load_model_missing_dir_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)


def _fake_convert(calls, fail=False):
    def convert(gguf_path, tmp):
        calls.append(tmp)
        (tmp / "config.json").write_text("{}")
        if fail:
            raise KeyboardInterrupt
        (tmp / weights.CONVERSION_MARKER).write_text("{}")
    return convert


def test_convert_gguf_is_atomic_and_idempotent(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    out = tmp_path / "conv"
    calls: list = []
    monkeypatch.setattr(weights, "_convert_into", _fake_convert(calls, fail=True))
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(gguf, out)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]

    monkeypatch.setattr(weights, "_convert_into", _fake_convert(calls))
    assert convert_gguf(gguf, out) == out and weights.is_complete_conversion(out)
    gguf.unlink()                                       # complete: the source is not needed
    assert convert_gguf(gguf, out) == out and len(calls) == 2


def test_convert_gguf_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="gguf_path"):
        convert_gguf(tmp_path / "missing.gguf", tmp_path / "out")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    (tmp_path / "half").mkdir()
    with pytest.raises(ValueError, match="out_dir"):
        convert_gguf(gguf, tmp_path / "half")


def test_legacy_llama3_rope_config_matches_transformers_frequencies():
    """transformers 4.x config.json style (top-level rope_theta, rope_scaling) as real Llama 3
    checkpoints ship it; our inverse frequencies must equal transformers' llama3 ones."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from psdlab.runtime.model import rope_inv_freq
    legacy = {"model_type": "llama", "vocab_size": 64, "hidden_size": 256, "intermediate_size": 64,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
              "max_position_embeddings": 131072, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}}
    cfg = ModelConfig.from_hf(legacy)
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling.factor == 32.0
    hf_inv, _ = ROPE_INIT_FUNCTIONS["llama3"](transformers.LlamaConfig(**legacy))
    ours = rope_inv_freq(cfg)
    assert not torch.allclose(ours, rope_inv_freq(ModelConfig.from_hf(
        {**legacy, "rope_scaling": None})))                # the scaling really changes something
    assert torch.allclose(ours, hf_inv.float(), rtol=1e-6, atol=0)


def test_bad_token_ids_and_empty_batch(llama):
    ours, cfg, _ = llama
    cache = KVCache(cfg, 2, 8)
    with pytest.raises(ValueError, match="tokens"):
        ours(torch.tensor([[1, cfg.vocab_size]]), cache, torch.tensor([0]))
    assert cache.lengths.tolist() == [0, 0]
    empty = ours(torch.zeros(0, 3, dtype=torch.long), cache, torch.zeros(0, dtype=torch.long))
    assert empty.shape == (0, 3, cfg.vocab_size)


def test_cache_dtype_may_differ_from_model_dtype(llama):
    ours, cfg, _ = llama
    tokens = torch.randint(0, cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(8))
    got = ours(tokens, KVCache(cfg, 2, 10, dtype=torch.bfloat16), torch.arange(2))
    assert (got - ours.forward_no_cache(tokens)).abs().max().item() < 0.1


def test_bad_slots_are_value_errors(llama):
    ours, cfg, _ = llama
    cache = KVCache(cfg, 2, 8)
    tokens = torch.zeros(2, 3, dtype=torch.long)
    for slots in ([0, 0], [0, 2], [1]):
        with pytest.raises(ValueError, match="slots"):
            ours(tokens, cache, torch.tensor(slots))
    assert cache.lengths.tolist() == [0, 0]
