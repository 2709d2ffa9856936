"""Graph-safe static passes on CPU (`runtime.static_pass`, `runtime.pass_graphs`): the same
logits as the dynamic pass with padding rows present, padding never touching a real slot, no
device read inside a pass, capture once per shape and replay through an injectable capture,
and greedy SD / PSD on static passes equal to AR (also in the batch-invariant mode)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import given, settings, strategies as st  # noqa: E402

from psdlab.runtime.kv_cache import KVCache  # noqa: E402
from psdlab.runtime.model_config import ModelConfig  # noqa: E402
from psdlab.runtime.pass_graphs import (PassPlan, StaticPasses, capture_eager)  # noqa: E402
from psdlab.runtime.static_pass import batch_buckets, bucket_of, span_buckets  # noqa: E402
from psdlab.runtime.weights import random_model  # noqa: E402

CFG = ModelConfig.from_hf({"model_type": "llama", "vocab_size": 97, "hidden_size": 64,
                           "intermediate_size": 96, "num_hidden_layers": 2,
                           "num_attention_heads": 4, "num_key_value_heads": 2,
                           "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
                           "tie_word_embeddings": False})
SLOTS, MAX_LEN = 6, 160


@pytest.fixture(scope="module")
def model():
    return random_model(CFG, seed=3, std=0.1)


def _prefixes(model, cache: KVCache, lens: list[int], seed: int) -> None:
    """Fill slot i with a random prefix of lens[i] tokens (dynamic path)."""
    gen = torch.Generator().manual_seed(seed)
    for slot, n in enumerate(lens):
        if n:
            row = torch.randint(0, CFG.vocab_size, (n,), generator=gen).tolist()
            model.forward_rows([row], cache, [slot])


def _pair(model, lens, seed=0, plan=None, capture=capture_eager):
    dyn = KVCache(CFG, SLOTS, MAX_LEN)
    sta = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    _prefixes(model, dyn, lens, seed)
    _prefixes(model, sta, lens, seed)
    plan = plan or PassPlan(((1, False), (5, False), (2, True)), SLOTS)
    return dyn, sta, StaticPasses(model, sta, plan, capture)


def test_buckets():
    assert batch_buckets(6) == (1, 2, 4, 6) and batch_buckets(8) == (1, 2, 4, 8)
    assert batch_buckets(1) == (1,)
    assert span_buckets(160) == (64, 128, 160) and span_buckets(64) == (64,)
    assert bucket_of(3, (1, 2, 4)) == 4
    with pytest.raises(ValueError, match="rows: 5 is more than the largest bucket 4"):
        bucket_of(5, (1, 2, 4))


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_static_logits_equal_the_dynamic_pass_with_padding_rows(model, data):
    """Ragged rows of 1..5 tokens on a subset of slots (so the batch bucket pads), in a random
    slot order: every real position's logits equal the dynamic pass's (fp32, 1e-5), and the
    caches' real contents and lengths agree after."""
    lens = data.draw(st.lists(st.integers(0, 120), min_size=SLOTS, max_size=SLOTS))
    slots = data.draw(st.lists(st.integers(0, SLOTS - 1), min_size=1, max_size=SLOTS - 1,
                               unique=True))
    widths = data.draw(st.lists(st.integers(1, 5), min_size=len(slots), max_size=len(slots)))
    rows = [data.draw(st.lists(st.integers(0, CFG.vocab_size - 1), min_size=w, max_size=w))
            for w in widths]
    dyn, sta, passes = _pair(model, lens)
    want = model.forward_rows(rows, dyn, slots)
    got = passes.forward(slots, rows, only_last=False)
    assert got is not None and got.shape[0] == len(slots)
    for i, w in enumerate(widths):
        torch.testing.assert_close(got[i, :w], want[i, :w], rtol=1e-5, atol=1e-5)
    assert sta.host_lengths == dyn.host_lengths
    for layer in range(CFG.num_layers):
        for s in range(SLOTS):
            n = dyn.host_lengths[s]
            torch.testing.assert_close(sta.k[layer][s, :, :n], dyn.k[layer][s, :, :n],
                                       rtol=1e-5, atol=1e-5)
    assert sta.lengths[:SLOTS].tolist() == dyn.host_lengths


def test_only_last_and_device_tokens(model):
    dyn, sta, passes = _pair(model, [5, 9, 0, 3, 7, 1])
    rows = [[4, 5], [6], [7, 8]]
    want = model.forward_rows(rows, dyn, [1, 3, 4], only_last=True)
    got = passes.forward([1, 3, 4], rows, only_last=True)
    assert got is not None and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    nxt = want[:, 0].argmax(-1)[:, None]
    want2 = model.forward_planned(nxt, dyn, [1, 3, 4], [1, 1, 1], only_last=True)
    got2 = passes.forward([1, 3, 4], None, True, tokens=nxt)
    assert got2 is not None
    torch.testing.assert_close(got2, want2, rtol=1e-5, atol=1e-5)


def test_padding_never_touches_a_slot_outside_the_call(model):
    """Slots not in the call (and every real slot's positions past its new length) keep
    their bytes; the scratch slot takes the padding's writes."""
    _dyn, sta, passes = _pair(model, [20, 30, 40, 10, 0, 0])
    before = [(k.clone(), v.clone()) for k, v in zip(sta.k, sta.v)]
    lengths = list(sta.host_lengths)
    assert passes.forward([0, 2], [[1, 2, 3], [4]], only_last=False) is not None  # 2 of 5
    for (k0, v0), k1, v1 in zip(before, sta.k, sta.v):
        for s in (1, 3, 4, 5):
            assert torch.equal(k0[s], k1[s]) and torch.equal(v0[s], v1[s])
        assert torch.equal(k0[0, :, lengths[0] + 3:], k1[0, :, lengths[0] + 3:])
        assert torch.equal(k0[2, :, lengths[2] + 1:], k1[2, :, lengths[2] + 1:])
        assert not torch.equal(k0[sta.scratch_slot], k1[sta.scratch_slot])


def test_a_static_pass_reads_nothing_back_from_the_device(model):
    from test_runtime_syncs import _Reads
    _dyn, sta, passes = _pair(model, [4, 4, 4, 0, 0, 0])
    with _Reads() as reads:
        passes.forward([0, 1, 2], [[1, 2], [3], [4, 5, 6, 7, 8]], only_last=False)
        passes.forward([0, 1], None, True, tokens=torch.tensor([[3], [4]]))
    assert reads.calls == []


class _FakeCapture:
    """Records each capture and replay; a replay runs the pass eagerly."""

    def __init__(self) -> None:
        self.captured: list[object] = []
        self.replays: list[int] = []

    def __call__(self, fn, device):
        index = len(self.captured)
        self.captured.append(fn)
        fake = self

        class R:
            def replay(self):
                fake.replays.append(index)
                return fn()
        return R()


def test_every_shape_is_captured_once_at_start_and_replayed_after(model):
    cap = _FakeCapture()
    plan = PassPlan(((1, False), (5, False)), SLOTS)
    _dyn, sta, passes = _pair(model, [3, 3, 3, 3, 0, 0], plan=plan, capture=cap)
    shapes = plan.shapes(MAX_LEN)
    assert len(cap.captured) == len(shapes) == 2 * len(batch_buckets(SLOTS)) * 3
    assert passes.info()["static_shapes"] == len(shapes)
    passes.forward([0, 1, 2], [[1], [2], [3]], only_last=False)      # 3 rows -> bucket 4
    passes.forward([0, 1, 2], [[1, 2, 3], [2], [3]], only_last=False)
    passes.forward([0], [[9]], only_last=False)
    assert len(cap.captured) == len(shapes)                          # nothing captured late
    chosen = [shapes[i] for i in cap.replays]
    assert [(s.rows, s.tokens, s.span) for s in chosen] == [(4, 1, 64), (4, 5, 64), (1, 1, 64)]
    # a row longer than every width, or more keys than max_len: no shape; the caller goes eager
    assert passes.forward([3], [[1] * 6], only_last=False) is None


def test_uniform_plan_has_one_shape_per_width():
    plan = PassPlan(((5, False),), 6, uniform=True)
    assert [(s.rows, s.tokens, s.span) for s in plan.shapes(MAX_LEN)] == [(6, 5, MAX_LEN)]


def test_passes_option_is_checked():
    from psdlab.runtime.runner import resolve_passes
    assert resolve_passes("auto", "cpu", "off") == "dynamic"
    assert resolve_passes("auto", "cuda", "off") == "fused-k"     # tests/test_fused_passes.py
    assert resolve_passes("auto", "cuda", "default") == "graphs"
    assert resolve_passes("auto", "cuda", "reduce-overhead") == "dynamic"
    with pytest.raises(ValueError, match="passes: static makes its own CUDA graphs"):
        resolve_passes("static", "cpu", "reduce-overhead")
    with pytest.raises(ValueError, match="passes: graphs need a CUDA device"):
        resolve_passes("graphs", "cpu", "off")
    with pytest.raises(ValueError, match="passes: must be one of"):
        resolve_passes("fast", "cpu", "off")


def test_a_static_pass_traces_through_dynamo(model):
    """compile="eager" (dynamo, no inductor: what CPU tests afford) gives the same logits: the
    pass has no graph break that would stop inductor from fusing it on a GPU."""
    torch._dynamo.reset()
    plan = PassPlan(((1, False), (5, False)), SLOTS, compile="eager")
    dyn, _sta, passes = _pair(model, [5, 9, 0, 3, 7, 1], plan=plan)
    rows = [[4, 5, 6], [6], [7, 8]]
    want = model.forward_rows(rows, dyn, [1, 3, 4])
    with torch._dynamo.config.patch(error_on_recompile=False):
        got = passes.forward([1, 3, 4], rows, only_last=False)
    assert got is not None
    for i, r in enumerate(rows):
        torch.testing.assert_close(got[i, :len(r)], want[i, :len(r)], rtol=1e-5, atol=1e-5)


def test_an_eager_pass_over_a_wider_key_span_gives_the_same_logits(model):
    """Eager passes beside static ones attend over a span bucket (a few attention shapes, all
    run at start): keys past each row's length are masked, so the logits do not change."""
    a, b = KVCache(CFG, SLOTS, MAX_LEN), KVCache(CFG, SLOTS, MAX_LEN)
    _prefixes(model, a, [5, 40, 0, 3, 7, 1], 0)
    _prefixes(model, b, [5, 40, 0, 3, 7, 1], 0)
    rows = [[1, 2, 3], [4]]
    want = model.forward_rows(rows, a, [0, 1])
    got = model.forward_rows(rows, b, [0, 1], width=8, span=128)
    for i, r in enumerate(rows):
        torch.testing.assert_close(got[i, :len(r)], want[i, :len(r)], rtol=1e-5, atol=1e-5)
