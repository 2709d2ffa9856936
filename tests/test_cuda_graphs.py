"""CUDA only (skipped without a GPU): the captured graphs of the static passes give the eager
static pass's logits and the dynamic pass's (fp32), and replays after capture read the inputs
written since.  `psdlab bench-gpu` covers speed; this covers correctness of capture."""
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


@pytest.mark.parametrize("mode,invariant", [("sd-sep", False), ("psd", False), ("psd", True)])
def test_engine_on_cuda_graphs_equals_target_greedy_fp32(tmp_path_factory, mode, invariant):
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
    with Engine(EngineConfig(mode=mode, passes="graphs", batch_invariant=invariant, **common),
                ModelSpec(str(pair["target"])), ModelSpec(str(pair["noisy"]))) as eng:
        result = eng.run(reqs)
    assert [o.token_ids for o in result.outputs] == want
    assert result.trace.run.extra["passes"]["target"]["passes"] == "graphs"
