"""Fused static passes on CPU (`runtime.fused_passes`, `--passes fused` / `fused-k`): compiled
once per pass kind over every batch and key-span bucket, they give the dynamic pass's logits
(fp32, 1e-5) with padding rows present; one compile per pass kind, no graph break; the
drafter's k passes in one callable give the same proposals and probabilities as k single
passes; nothing inside a pass or the loop reads the device back; greedy SD / PSD on them
equal AR.  Inductor compiles here (the C++ compiler of this machine): the logits test uses it;
the compile-count, graph-break and loop tests use dynamo's counting backend or aot_eager."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._dynamo.testing import CompileCounter  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from psdlab.runtime.fused_passes import (FusedInputs, FusedKinds, draft_loop,  # noqa: E402
                                         fused_batch_buckets, fused_pass)
from psdlab.runtime.kv_cache import KVCache  # noqa: E402
from psdlab.runtime.pass_graphs import PassPlan, StaticPasses, capture_eager  # noqa: E402
from psdlab.runtime.static_pass import PassShape, batch_buckets, span_buckets  # noqa: E402
from psdlab.runtime.weights import random_model  # noqa: E402
from test_static_pass import CFG, MAX_LEN, SLOTS, _prefixes  # noqa: E402

WIDTHS = ((1, False), (5, False))


@pytest.fixture(scope="module")
def model():
    return random_model(CFG, seed=3, std=0.1)


@pytest.fixture(scope="module")
def inductor_passes(model):
    """One fused StaticPasses compiled by inductor (two kinds, every bucket run at start),
    and how many graphs inductor compiled for it."""
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    before = counters["stats"]["unique_graphs"]
    passes = StaticPasses(model, cache, PassPlan(WIDTHS, SLOTS, fused="inductor"),
                          capture_eager)
    for _inp, replayer in passes.passes.values():      # every bucket once (a GPU captures each)
        replayer.replay()
    return cache, passes, counters["stats"]["unique_graphs"] - before


def _dynamic(model, lens, seed=0):
    cache = KVCache(CFG, SLOTS, MAX_LEN)
    _prefixes(model, cache, lens, seed)
    return cache


def _refill(model, cache: KVCache, lens, seed=0) -> None:
    cache.reset()
    _prefixes(model, cache, lens, seed)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fused_logits_equal_the_dynamic_pass_with_padding_rows(model, inductor_passes, data):
    """Inductor-compiled fused passes over ragged rows of 1..5 tokens on a subset of slots
    (the batch bucket pads; buckets of 1 are left out, so one row pads to 2), in random slot
    order: every real position's logits equal the dynamic pass's, and so do the caches."""
    sta, passes, _graphs = inductor_passes
    lens = data.draw(st.lists(st.integers(0, 120), min_size=SLOTS, max_size=SLOTS))
    slots = data.draw(st.lists(st.integers(0, SLOTS - 1), min_size=1, max_size=SLOTS - 1,
                               unique=True))
    widths = data.draw(st.lists(st.integers(1, 5), min_size=len(slots), max_size=len(slots)))
    rows = [data.draw(st.lists(st.integers(0, CFG.vocab_size - 1), min_size=w, max_size=w))
            for w in widths]
    dyn = _dynamic(model, lens)
    _refill(model, sta, lens)
    want = model.forward_rows(rows, dyn, slots)
    got = passes.forward(slots, rows, only_last=False)
    assert got is not None and got.shape[0] == len(slots)
    for i, w in enumerate(widths):
        torch.testing.assert_close(got[i, :w], want[i, :w], rtol=1e-5, atol=1e-5)
    assert sta.host_lengths == dyn.host_lengths
    assert sta.lengths[:SLOTS].tolist() == dyn.host_lengths
    for layer in range(CFG.num_layers):
        for s in range(SLOTS):
            n = dyn.host_lengths[s]
            torch.testing.assert_close(sta.k[layer][s, :, :n], dyn.k[layer][s, :, :n],
                                       rtol=1e-5, atol=1e-5)


def test_inductor_compiles_once_per_pass_kind(inductor_passes):
    _sta, passes, graphs = inductor_passes
    shapes = len(WIDTHS) * len(fused_batch_buckets(batch_buckets(SLOTS))) * len(
        span_buckets(MAX_LEN))
    assert passes.info()["static_shapes"] == shapes == 2 * 3 * 3
    assert graphs == len(WIDTHS)


def test_one_compile_per_pass_kind_across_buckets(model):
    """Three pass kinds x 3 batch buckets x 3 key spans = 27 shapes, all run: three compiles
    (dynamo's counting backend); calls after start compile nothing."""
    cnt = CompileCounter()
    widths = ((1, False), (5, False), (2, True))
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    _prefixes(model, cache, [3, 70, 0, 5, 130, 1], 0)
    passes = StaticPasses(model, cache, PassPlan(widths, SLOTS, fused=cnt), capture_eager)
    for _inp, replayer in passes.passes.values():
        replayer.replay()
    assert len(passes.passes) == 27 and cnt.frame_count == 3
    for slots, rows in (([0], [[1]]), ([0, 1, 3], [[1, 2], [3], [4, 5, 6, 7, 8]]),
                        ([0, 1, 2, 3, 4], [[1]] * 5), ([4, 1], [[2, 3], [4]])):
        assert passes.forward(slots, rows, only_last=False) is not None
    assert passes.forward([1, 4], [[2, 3], [4]], only_last=True) is not None
    assert cnt.frame_count == 3


def test_the_per_shape_path_compiles_every_shape(model):
    """The contrast: PassPlan.compile (a fresh compile per shape, `pass_graphs._bind`)
    compiles each bucket on its own."""
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    passes = StaticPasses(model, cache, PassPlan(((1, False),), SLOTS, compile="eager"),
                          capture_eager)
    with torch._dynamo.config.patch(recompile_limit=64):
        for _inp, replayer in passes.passes.values():
            replayer.replay()
    assert counters["stats"]["unique_graphs"] - before == len(passes.passes) > 1


@pytest.mark.parametrize("tokens,only_last", [(1, False), (5, False), (5, True)])
def test_a_fused_pass_has_no_graph_break(model, tokens, only_last):
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    FusedKinds(model, cache, None)            # fills the model's RoPE table, as a runner does
    inp = FusedInputs(PassShape(4, tokens, 128, only_last), cache.device)
    with torch.inference_mode():
        explained = torch._dynamo.explain(fused_pass)(model, cache, inp.grid, inp.keys, tokens,
                                                      only_last)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def _k_single_passes(model, cache: KVCache, slots, rows, k):
    """The drafter's k passes one by one on the dynamic path: picks [n, k], softmaxes."""
    logits = model.forward_rows(rows, cache, slots, only_last=True)[:, 0]
    picks, probs = [], []
    for j in range(k):
        tok = logits.argmax(-1)
        picks.append(tok)
        probs.append(torch.softmax(logits.float(), -1))
        if j < k - 1:
            logits = model.forward_planned(tok[:, None], cache, slots, [1] * len(slots),
                                           only_last=True)[:, 0]
    return torch.stack(picks, 1), torch.stack(probs, 1)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_k_passes_in_one_callable_equal_k_single_passes(model, backend, data):
    """The drafting loop (uncompiled, as graphs-k captures it; and compiled) on a subset of
    slots with 1..4 unseen tokens each: the same proposals, the same probabilities (1e-5),
    the same cache lengths as the k passes one by one."""
    k = data.draw(st.integers(1, 4))
    lens = data.draw(st.lists(st.integers(0, 100), min_size=SLOTS, max_size=SLOTS))
    slots = data.draw(st.lists(st.integers(0, SLOTS - 1), min_size=1, max_size=SLOTS - 1,
                               unique=True))
    rows = [data.draw(st.lists(st.integers(0, CFG.vocab_size - 1), min_size=1, max_size=4))
            for _ in slots]
    dyn = _dynamic(model, lens)
    sta = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    _prefixes(model, sta, lens, 0)
    plan = PassPlan(((1, True), (4, True)), SLOTS, fused=backend, draft_k=k, draft_probs=True)
    passes = StaticPasses(model, sta, plan, capture_eager)
    want_picks, want_probs = _k_single_passes(model, dyn, slots, rows, k)
    got = passes.draft(slots, rows, k)
    assert got is not None and got[1] is not None
    assert got[0].tolist() == want_picks.tolist()
    torch.testing.assert_close(got[1], want_probs, rtol=1e-5, atol=1e-5)
    assert sta.host_lengths == dyn.host_lengths
    assert sta.lengths[:SLOTS].tolist() == dyn.host_lengths
    assert passes.draft(slots, rows, k + 1) is None          # another k: passes one by one


def test_the_k_pass_loop_compiles_no_more_than_its_single_passes(model):
    cnt = CompileCounter()
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    plan = PassPlan(((1, True), (4, True)), SLOTS, fused=cnt, draft_k=4)
    passes = StaticPasses(model, cache, plan, capture_eager)
    for _inp, replayer, _probs in passes.loops.values():
        replayer.replay()
    for _inp, replayer in passes.passes.values():
        replayer.replay()
    assert len(passes.loops) == 2 * 3 * 3 and cnt.frame_count == 2


def test_nothing_reads_the_device_back_in_a_fused_pass_or_the_loop(model):
    """Run uncompiled (what the compiler traces) under the read counter; compiled with
    fullgraph, a read would be a graph break and an error (the tests above)."""
    from test_runtime_syncs import _Reads
    cache = KVCache(CFG, SLOTS, MAX_LEN, scratch=True)
    _prefixes(model, cache, [4, 4, 4, 0, 0, 0], 0)
    passes = StaticPasses(model, cache, PassPlan(((1, True), (4, True)), SLOTS, draft_k=3,
                                                 draft_probs=True), capture_eager)
    with _Reads() as reads:
        passes.forward([0, 1, 2], [[1, 2], [3], [4, 5, 6]], only_last=True)
        passes.forward([0, 1], None, True, tokens=torch.tensor([[3], [4]]))
        passes.draft([0, 2], [[5], [6, 7]], 3)
    assert reads.calls == []


def test_draft_loop_refuses_a_full_width_start():
    inp = FusedInputs(PassShape(2, 3, 64, only_last=False), torch.device("cpu"))
    with pytest.raises(ValueError, match="shape: a drafting loop starts"):
        draft_loop(lambda *a: torch.zeros(2, 1, 5), inp, 2)


def test_pass_modes_resolve():
    from psdlab.runtime.pass_modes import CUDA_DEFAULT_PASSES, PASS_MODES
    from psdlab.runtime.runner import resolve_passes
    assert resolve_passes("auto", "cpu", "off") == "dynamic"              # CPU default kept
    assert resolve_passes("auto", "cuda", "off") == CUDA_DEFAULT_PASSES == "fused-k"
    assert PASS_MODES[CUDA_DEFAULT_PASSES].fused and PASS_MODES["fused-k"].draft_loop
    assert resolve_passes("fused", "cpu", "off") == "fused"               # runs eagerly here
    with pytest.raises(ValueError, match="passes: graphs-k need a CUDA device"):
        resolve_passes("graphs-k", "cpu", "off")
    with pytest.raises(ValueError, match="passes: fused makes its own CUDA graphs"):
        resolve_passes("fused", "cuda", "reduce-overhead")


@pytest.mark.parametrize("mode,drafter,k,batch",
                         [("sd-sep", "noisy", 3, 3), ("psd", "noisy", 2, 2)])
def test_greedy_on_fused_k_passes_equals_ar(tmp_path_factory, mode, drafter, k, batch):
    """The engine with --passes fused-k (dynamo only, --compile eager: what CPU affords) and
    the drafter's k passes in one callable: greedy output equals AR on dynamic passes."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    from runtime_engine_util import prompts, shared_pair
    pair = shared_pair(tmp_path_factory)
    reqs = [Request(f"r{i}", tuple(p)) for i, p in enumerate(prompts(4, seed=5, lo=3, hi=30))]
    common = dict(k=k, batch=batch, max_new_tokens=10, max_len=96, ignore_eos=True,
                  backend="inline")
    with Engine(EngineConfig(mode="ar", passes="dynamic", **common),
                ModelSpec(str(pair["target"]))) as eng:
        want = [o.token_ids for o in eng.run(reqs).outputs]
    with Engine(EngineConfig(mode=mode, passes="fused-k", compile="eager", **common),
                ModelSpec(str(pair["target"])), ModelSpec(str(pair[drafter]))) as eng:
        result = eng.run(reqs)
        loops = eng.drafter.info.get("draft_loops") if eng.drafter is not None else None
    assert [o.token_ids for o in result.outputs] == want
    assert result.trace.run.extra["passes"]["drafter"]["passes"] == "fused-k"
    assert loops and loops > 0
