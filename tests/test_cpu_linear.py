"""oneDNN-packed linear layers of the CPU runner (`runtime.cpu_linear`): the same products as
``F.linear``, row-count invariant, used by the runner by default, and lossless end to end."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from psdlab.runtime.cpu_linear import PackedLinear, pack_linears, packing_supported

pytestmark = pytest.mark.skipif(not packing_supported(torch.float32),
                                reason="this PyTorch cannot pack linear weights (no oneDNN)")


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 3), n_in=st.integers(1, 70),
       n_out=st.integers(1, 90), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_packed_equals_f_linear(rows, width, n_in, n_out, bias, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n_out, n_in, generator=g)
    b = torch.randn(n_out, generator=g) if bias else None
    x = torch.randn(rows, width, n_in, generator=g)
    got = PackedLinear(w, b)(x)
    assert got.shape == (rows, width, n_out)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-4)


def test_a_rows_product_does_not_depend_on_the_rows_beside_it():
    """Row i of a 20-row product equals row i computed alone (the verify pass of m x (k + 1)
    tokens and the decode pass of one token see the same numbers).  On this project's
    AVX-512 VM it is bit for bit; other CPUs' kernels may block rows differently, so the test
    allows float32 rounding."""
    g = torch.Generator().manual_seed(1)
    w, x = torch.randn(3072, 576, generator=g), torch.randn(20, 576, generator=g)
    lin = PackedLinear(w, None)
    full = lin(x)
    alone = torch.cat([lin(x[i:i + 1]) for i in range(20)])
    torch.testing.assert_close(full, alone, rtol=1e-6, atol=1e-5)


def _tiny_model():
    from psdlab.runtime.model_config import ModelConfig
    from psdlab.runtime.model import Transformer
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=12, max_position_embeddings=256,
                      tie_word_embeddings=True)
    return Transformer(cfg).eval(), cfg


def test_pack_linears_replaces_every_linear_and_keeps_the_logits():
    model, cfg = _tiny_model()
    tokens = torch.randint(0, cfg.vocab_size, (2, 9))
    before = model.forward_no_cache(tokens)
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert pack_linears(model) == n_linear == 4 * cfg.num_layers + 1
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert model.embed_tokens.weight.layout == torch.strided     # the lookup keeps it dense
    torch.testing.assert_close(model.forward_no_cache(tokens), before, rtol=1e-5, atol=1e-4)


def test_unsupported_dtypes_are_left_alone():
    model, _ = _tiny_model()
    model = model.to(torch.float16)
    assert pack_linears(model) == 0
    assert sum(type(m) is nn.Linear for m in model.modules()) == 9
    assert not packing_supported(torch.float16)


def _runner(pack: bool):
    from psdlab.runtime.runner import ModelRunner, ModelSpec, RunnerConfig
    return ModelRunner(RunnerConfig(spec=ModelSpec(factory=_tiny_factory), max_slots=2,
                                    max_len=64, pack_weights=pack))


def _tiny_factory(device, dtype):
    model, cfg = _tiny_model()
    return model.to(device=device, dtype=dtype), cfg


def test_the_runner_packs_by_default_and_stays_lossless():
    """Packed by default (and MKL's row padding off); the logits match the unpacked runner's;
    greedy verification accepts every one of the runner's own drafts (draft and verify
    passes of different shapes agree)."""
    packed, plain = _runner(True), _runner(False)
    assert packed.info()["packed_linears"] == 9 and plain.info()["packed_linears"] == 0
    assert not packed.pad_slow_gemm and plain.pad_slow_gemm    # MKL's slow row counts only
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    logits = []
    for r in (packed, plain):
        r.feed([0, 1], [0, 0], prompts)
        logits.append(r._forward([0, 1], [[20], [21]], only_last=True))
        r._rollback([0, 1], [5, 3])
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-5, atol=1e-4)
    drafts, _ = packed.draft([0, 1], [5, 3], [[20], [21]], [4, 4])
    accepted, emitted = packed.verify([0, 1], [5, 3], [[20], [21]], drafts, None)
    assert accepted == [4, 4] and [e[:4] for e in emitted] == drafts
