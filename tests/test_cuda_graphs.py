"""CUDA only (skipped without a GPU): the captured graphs of the static passes give the eager
static pass's logits and the dynamic pass's (fp32), and replays after capture read the inputs
written since; so do the fused passes (inductor, one compile per pass kind, a graph per
bucket), and the drafter's k passes captured as one graph give k single passes' picks.
`psdlab bench-gpu` covers speed; this covers correctness of capture."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from psdlab.runtime.kv_cache import KVCache  # noqa: E402
from psdlab.runtime.pass_graphs import (PassPlan, StaticPasses, capture_cuda,  # noqa: E402
                                        capture_eager)
from test_static_pass import CFG, MAX_LEN, SLOTS, _prefixes  # noqa: E402

DEV = torch.device("cuda:0")


def test_graph_replays_equal_eager_and_dynamic_passes():
    from psdlab.runtime.weights import random_model
    model = random_model(CFG, seed=3, device=DEV, std=0.1)
    lens = [7, 30, 0, 64, 12, 100]
    caches = {name: KVCache(CFG, SLOTS, MAX_LEN, DEV, scratch=name != "dynamic")
              for name in ("dynamic", "eager", "graphs")}
    for c in caches.values():
        _prefixes(model, c, lens, seed=1)
    plan = PassPlan(((1, False), (5, False)), SLOTS)
    eager = StaticPasses(model, caches["eager"], plan, capture_eager)
    graphs = StaticPasses(model, caches["graphs"], plan, capture_cuda())
    calls = [([0, 3, 4], [[1, 2], [3], [4, 5, 6, 7, 8]]), ([1], [[9]]),
             ([0, 1, 3, 4, 5], [[1]] * 5), ([0, 3, 4], [[5, 6, 7], [8], [9, 9]])]
    for slots, rows in calls:
        want = model.forward_rows(rows, caches["dynamic"], slots)
        a = eager.forward(slots, rows, only_last=False)
        b = graphs.forward(slots, rows, only_last=False)
        assert a is not None and b is not None
        for i, r in enumerate(rows):
            torch.testing.assert_close(b[i, :len(r)], a[i, :len(r)], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(b[i, :len(r)], want[i, :len(r)], rtol=1e-4, atol=1e-4)
    assert caches["graphs"].host_lengths == caches["dynamic"].host_lengths
    assert caches["graphs"].lengths[:SLOTS].tolist() == caches["dynamic"].host_lengths


def test_fused_graphs_equal_dynamic_passes_and_the_k_pass_graph_k_single_passes():
    """Inductor-compiled fused passes (one compile per kind), a CUDA graph per bucket: the
    dynamic pass's logits (fp32); the drafter's k passes captured as one graph: the same
    picks as k single dynamic passes; one compile per pass kind."""
    from torch._dynamo.utils import counters

    from psdlab.runtime.weights import random_model
    from test_fused_passes import _k_single_passes
    model = random_model(CFG, seed=3, device=DEV, std=0.1)
    lens = [7, 30, 0, 64, 12, 100]
    caches = {name: KVCache(CFG, SLOTS, MAX_LEN, DEV, scratch=name != "dynamic")
              for name in ("dynamic", "fused")}
    for c in caches.values():
        _prefixes(model, c, lens, seed=1)
    before = counters["stats"]["unique_graphs"]
    plan = PassPlan(((1, True), (5, True), (5, False)), SLOTS, fused="inductor", draft_k=3,
                    draft_probs=True)
    fused = StaticPasses(model, caches["fused"], plan, capture_cuda())
    assert counters["stats"]["unique_graphs"] - before == 3
    calls = [([0, 3, 4], [[1, 2], [3], [4, 5, 6, 7, 8]]), ([1], [[9]]),
             ([0, 1, 3, 4, 5], [[1]] * 5)]
    for slots, rows in calls:
        want = model.forward_rows(rows, caches["dynamic"], slots)
        got = fused.forward(slots, rows, only_last=False)
        assert got is not None
        for i, r in enumerate(rows):
            torch.testing.assert_close(got[i, :len(r)], want[i, :len(r)], rtol=1e-4, atol=1e-4)
    want_picks, want_probs = _k_single_passes(model, caches["dynamic"], [0, 3, 4],
                                              [[5], [6, 7], [8]], 3)
    got_loop = fused.draft([0, 3, 4], [[5], [6, 7], [8]], 3)
    assert got_loop is not None and got_loop[1] is not None
    assert got_loop[0].tolist() == want_picks.tolist()
    torch.testing.assert_close(got_loop[1], want_probs, rtol=1e-4, atol=1e-4)
    assert caches["fused"].host_lengths == caches["dynamic"].host_lengths
    assert caches["fused"].lengths[:SLOTS].tolist() == caches["dynamic"].host_lengths


@pytest.mark.parametrize("mode,invariant,passes", [
    ("sd-sep", False, "graphs"), ("psd", False, "graphs"), ("psd", True, "graphs"),
    ("psd", False, "fused-k"), ("sd-sep", False, "graphs-k")])
def test_engine_on_cuda_graphs_equals_target_greedy_fp32(tmp_path_factory, mode, invariant,
                                                         passes):
    """Two streams of one GPU (thread workers), every decode pass a graph replay: greedy
    output equals AR's on eager dynamic passes (fp32), and the trace says graphs ran."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    from runtime_engine_util import prompts, shared_pair
    pair = shared_pair(tmp_path_factory)
    reqs = [Request(f"r{i}", tuple(p)) for i, p in enumerate(prompts(6, seed=5, lo=3, hi=50))]
    common = dict(k=3, batch=3, max_new_tokens=12, max_len=128, ignore_eos=True,
                  device="cuda:0", backend="thread")
    with Engine(EngineConfig(mode="ar", passes="dynamic", **common),
                ModelSpec(str(pair["target"]))) as eng:
        want = [o.token_ids for o in eng.run(reqs).outputs]
    with Engine(EngineConfig(mode=mode, passes=passes, batch_invariant=invariant, **common),
                ModelSpec(str(pair["target"])), ModelSpec(str(pair["noisy"]))) as eng:
        result = eng.run(reqs)
    assert [o.token_ids for o in result.outputs] == want
    assert result.trace.run.extra["passes"]["target"]["passes"] == passes
